#!/usr/bin/env python3
"""perf/sim_validate.py: the analysis half of perf/sim_validate.sh (see there).

    sim_validate.py fit OUTDIR CPUS       calibration -> shell assignments (eval'ed by the script)
    sim_validate.py report OUTDIR SIM [SIM2]   measured vs tutti-sim tables and the targets

Reads nccl-tests tables (the perf programs' stdout) from OUTDIR: cal_inter.R.txt,
cal_intra.R.txt (2-rank sendrecv_perf across hosts / inside a host: latencies and
bandwidths), cal_cpu.R.txt and cal_cpunet.R.txt (8-rank sendrecv_perf on the bed, hosts in
blocks and round robin: CPU time per message through shm and across hosts),
cal_peak.R.txt (2 ranks across hosts on unlimited links: the veth peak rate) and ar.ALGO.R.txt (8-rank all_reduce_perf with
TUTTI_ALGO=ALGO; "auto": the tuner). Times are the out-of-place column, the median over the R
repetitions. SIM is the model judged (the script: the tbf token bucket); SIM2, when given, a
second one reported alongside (the script: a plain-rate network).
"""
import glob
import os
import re
import statistics
import subprocess
import sys

ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s")


def table(path):
    """{size: out-of-place time in us} of one perf program's output."""
    rows = {}
    with open(path) as f:
        for line in f:
            m = ROW.match(line)
            if m:
                rows[int(m.group(1))] = float(m.group(3))
    return rows


def medians(paths):
    per = {}
    for p in paths:
        for size, t in table(p).items():
            per.setdefault(size, []).append(t)
    return {s: statistics.median(v) for s, v in sorted(per.items())}


def latency(rows):
    """median time (us) of the sizes <= 512 B"""
    return statistics.median([t for s, t in rows.items() if s <= 512])


def fit(rows):
    """bandwidth (bytes/us): slope of time between the largest size and a quarter of it (the
    model's a + S/B)."""
    sizes = sorted(rows)
    big, quarter = sizes[-1], max(s for s in sizes if s <= sizes[-1] // 4)
    slope = (rows[big] - rows[quarter]) / (big - quarter)
    return 1 / slope if slope > 0 else big / rows[big]


def cmd_fit(out, cpus):
    def rows(name):
        return medians(glob.glob(os.path.join(out, f"{name}.*.txt")))
    inter, intra, peak = fit(rows("cal_inter")), fit(rows("cal_intra")), rows("cal_peak")
    lat_inter, lat_intra = latency(rows("cal_inter")), latency(rows("cal_intra"))
    # 8 ranks each send one message at once on `cpus` CPUs: placed round robin, all 8 cross
    # the network (an exchange takes 8 / cpus of their CPU time); in blocks of 2 per host, 4 do
    # and 4 go through shared memory
    cpu, cpunet = rows("cal_cpu"), rows("cal_cpunet")
    msg_cpu = latency(cpunet) * cpus / 8 if cpunet else 0
    shm_msg_cpu = max((latency(cpu) * cpus - 4 * msg_cpu) / 4, 0.1) if cpu and cpunet else 0.1
    peak = max(peak) / peak[max(peak)] if peak else inter
    # bytes/us = MB/s; Gbit/s = bytes/us * 8 / 1000; the tuner wants GB/s = bytes/us / 1000
    print(f"INTER_LAT_US={lat_inter:.3f} INTER_GBPS={inter * 8 / 1000:.5f} "
          f"INTRA_LAT_US={lat_intra:.3f} INTRA_GBPS={intra * 8 / 1000:.5f} "
          f"INTER_GBYTES={inter / 1000:.6f} INTRA_GBYTES={intra / 1000:.6f} "
          f"PEAK_GBPS={peak * 8 / 1000:.5f} MSG_CPU_US={msg_cpu:.3f} "
          f"SHM_MSG_CPU_US={shm_msg_cpu:.3f}")


def simulate(sim_cmd):
    """{algo: {size: predicted us}} from tutti-sim's table."""
    res = subprocess.run(sim_cmd, shell=True, capture_output=True, text=True, check=True).stdout
    pred = {}
    for line in res.splitlines():
        f = line.split()
        if line.startswith("#") or len(f) < 6 or f[5] == "-":
            continue
        pred.setdefault(f[4], {})[int(f[0])] = float(f[5])
    return res, pred


def size_label(s):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if s >= 1 << shift and s % (1 << shift) == 0:
            return f"{s >> shift}{unit}"
    return str(s)


def print_tables(meas, preds):
    """One table per algorithm; returns per model the |error| % of the points >= 64 KiB."""
    errs = [[] for _ in preds]
    head = "".join(f" {'predicted us':>13} {'error %':>8}" + (" (plain)" if i else "")
                   for i in range(len(preds)))
    for algo, rows in meas.items():
        print(f"\n## {algo}\n{'size':>8} {'measured us':>12}{head}")
        for s, t in rows.items():
            line = f"{size_label(s):>8} {t:12.1f}"
            for i, pred in enumerate(preds):
                p = pred.get(algo, {}).get(s)
                e = (p - t) / t * 100 if p is not None else float("nan")
                if p is not None and s >= 64 * 1024:
                    errs[i].append((abs(e), algo, s))
                line += f" {p if p is not None else float('nan'):13.1f} {e:8.1f}" + ("      " if i else "")
            print(line)
    return errs


def sim_target(errs, name):
    w = max(errs, default=(0, "-", 0))
    over = sum(1 for e in errs if e[0] > 20)
    return (name, bool(errs) and over == 0,
            f"{over} of {len(errs)} points over 20%; worst {w[0]:.1f}% ({w[1]} {size_label(w[2])}); "
            f"median |error| {statistics.median([e[0] for e in errs]) if errs else 0:.1f}%")


PICK = re.compile(r"\[0\] TUTTI INFO tuner: AllReduce (\d+) bytes nranks \d+: chose (\w+)")


def auto_picks(out):
    """{size: algorithm} rank 0's tuner chose in the auto runs (TUTTI_DEBUG_SUBSYS=TUNING)."""
    picks = {}
    for p in sorted(glob.glob(os.path.join(out, "ar.auto.*.txt"))):
        with open(p) as f:
            for line in f:
                m = PICK.search(line)
                if m:
                    picks[int(m.group(1))] = m.group(2)
    return picks


def targets(meas, errs, picks):
    forced = {a: r for a, r in meas.items() if a != "auto"}
    sizes = sorted(set().union(*[set(r) for r in meas.values()]))
    res = []
    # 1. tree or rd >= 2x faster than ring at 8 B .. 4 KiB
    # (judged only when -a measured tree or rd next to the ring)
    small = [s for s in sizes if s <= 4096 and s in meas.get("ring", {})
             and any(s in forced.get(a, {}) for a in ("tree", "rd"))]
    worst = min(((meas["ring"][s] / min(forced[a][s] for a in ("tree", "rd") if a in forced
                                        and s in forced[a]), s) for s in small), default=(0, 0))
    if small:
        res.append(("tree or rd >= 2x faster than ring at 8 B - 4 KiB", worst[0] >= 2,
                    f"worst ratio ring/best(tree,rd) {worst[0]:.2f} at {size_label(worst[1])}"))
    # 2. ring or hier is the fastest at >= 16 MiB
    big = [s for s in sizes if s >= 16 << 20]
    losers = [(s, min((r[s], a) for a, r in forced.items() if s in r)[1]) for s in big]
    bad = [f"{size_label(s)}: {a}" for s, a in losers if a not in ("ring", "hier")]
    res.append(("ring or hier wins at >= 16 MiB", bool(big) and not bad,
                "fastest: " + ", ".join(f"{size_label(s)} {a}" for s, a in losers)))
    # 3. the tuner's pick within 10% of the fastest forced algorithm at every size: the pick's
    # own forced time (the auto runs log the pick); auto's separately measured time is shown too,
    # its difference from the same algorithm forced is run-to-run noise
    def fastest(s):
        return min(r[s] for r in forced.values() if s in r)

    def over(ratios):
        return ", ".join(size_label(s) for r, s in sorted(ratios, key=lambda x: x[1])
                         if r > 1.10) or "none"
    if picks:
        ratios = [(forced[a][s] / fastest(s), s) for s, a in picks.items()
                  if a in forced and s in forced[a]]
        missing = [s for s in sizes if s not in picks or picks[s] not in forced]
        w = max(ratios, default=(0, 0))
        res.append(("the tuner picks the fastest within 10% at every size",
                    bool(ratios) and w[0] <= 1.10 and not missing,
                    f"worst pick/fastest {w[0]:.2f} at {size_label(w[1])}; over 1.10 at "
                    + over(ratios) + "; picks: " + ", ".join(
                        f"{size_label(s)} {a}" for s, a in sorted(picks.items()))
                    + (f"; no pick logged at {', '.join(map(size_label, missing))}"
                       if missing else "")))
    if "auto" in meas:
        ratios = [(meas["auto"][s] / fastest(s), s)
                  for s in meas["auto"] if any(s in r for r in forced.values())]
        w = max(ratios)
        res.append(("(auto measured on its own) within 10% of the fastest", w[0] <= 1.10,
                    f"worst auto/fastest {w[0]:.2f} at {size_label(w[1])}; over 1.10 at "
                    + over(ratios)))
    # 4. tutti-sim within 20% at >= 64 KiB (each model)
    res.append(sim_target(errs[0], "tutti-sim within +-20% of measured at >= 64 KiB"))
    if len(errs) > 1:
        res.append(sim_target(errs[1], "(plain-rate model) tutti-sim within +-20% at >= 64 KiB"))
    print("\n## targets (measured on this test bed, 8 ranks)")
    for name, ok, detail in res:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")


def cmd_report(out, sims):
    algos = sorted({os.path.basename(p).split(".")[1] for p in glob.glob(os.path.join(out, "ar.*.txt"))})
    meas = {a: medians(glob.glob(os.path.join(out, f"ar.{a}.*.txt"))) for a in algos}
    meas = {a: r for a, r in meas.items() if r}
    preds = []
    for i, cmd in enumerate(sims):
        text, pred = simulate(cmd)
        preds.append(pred)
        with open(os.path.join(out, f"sim{i + 1}.txt"), "w") as f:
            f.write(text)
        print(f"# tutti-sim{' (second model)' if i else ''}: {cmd}")
    errs = print_tables(meas, preds)
    targets(meas, errs, auto_picks(out))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "fit":
        cmd_fit(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "report":
        cmd_report(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
