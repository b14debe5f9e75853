#!/usr/bin/env bash
# compare_allreduce.sh: tutti's ncclAllReduce against Open MPI's MPI_Allreduce, measured in the
# same invocation on the same machine (the machines are shared and noisy, so only a ratio
# measured side by side means anything).
#
# Runs all_reduce_perf under a plain `tutti-run -n N` (its defaults: ranks bound to cores of
# their own when they fit) and mpi_allreduce_perf under mpirun in Open MPI's two shared-memory
# configurations -- its default (CMA single copy, `--bind-to core`) and the tuned one (the FIFO
# without CMA, glibc's malloc kept from mmap/trim churn) -- interleaved, R times each (the
# order rotates between repetitions), on fp32 sums without the check. Per size it takes the
# median time of each, Open MPI at its best (the faster of its two medians: CMA pays at mid
# sizes, the FIFO at others), the ratios, and whether the targets hold (issue #20):
#   heap buffers:        busbw >= 1.5 x Open MPI  for 64 KiB .. 256 MiB
#   ncclMemAlloc (-M):   busbw >= 2 x Open MPI    for 256 KiB .. 256 MiB
#   both:                time  <= Open MPI        for 8 B .. 4 KiB
# Every tutti figure is also put against the memory system (docs/perf.md, "memory limit"):
# per size, the copy bandwidth of one core (membw -p 1: memcpy over the working set of the
# rank's buffers, the size out of place, half of it in place, one process) and of n cores
# copying at once (membw -p n, n = the ranks), measured in the same repetitions;
# the algorithm the library ran for that size (one extra run with TUTTI_DEBUG=INFO reads the
# COLL lines); the bytes that algorithm's schedule makes the busiest rank copy per byte of
# busbw (memlimit, from the steps sched_build gives); and so the busbw the memory allows,
# limit = copy rate of n cores / (bytes per busbw byte), and tutti's busbw as a fraction of it.
# -L leaves these columns out.
# Small sizes cost little more than a cache-line transfer each way, whose time on a virtual
# machine moves with where the hypervisor puts the vCPUs, within a fraction of a second
# (perf/linert; docs/perf-baseline.md): the medians of separate runs then compare machine
# states as much as libraries. So the time target is also measured by small_vs_mpi, both
# libraries in the same processes timed in alternating blocks of calls (in both of Open MPI's
# configurations; against the faster per size), and where that ran its verdict is the one that
# counts: PASS when the 95 % interval of the per-block ratios lies at or below 1.
# To keep a whole comparison to a few minutes on a 2-core machine, each size runs
# min(-n, max(3, iter-bytes / size)) iterations (the perf programs' --iter-bytes): ~0.1-0.3 s
# per size at Open MPI's bandwidth here.
#
# Exit status: 0 all targets in the measured range hold, 1 some target fails, 2 error.
set -euo pipefail

PY=/usr/bin/python3 # Debian's python3; the first python3 on PATH may be a bare one
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  cat <<EOF
usage: $(basename "$0") [options]
  -B dir     build directory holding bin/ (default: ../build next to this script, or this
             script's own directory when the programs are installed beside it)
  -p n       ranks (2)
  -r n       repetitions of each program (5)
  -b size    smallest size (8)            -e size   largest size (256M)
  -f n       size factor (2)
  -n n       most iterations per size (1000)
  -I size    bytes per size: iterations = min(-n, max(3, size/this)) (512M)
  -w n       warm-up iterations (5)
  -P out|in  compare the out-of-place (default) or the in-place columns
  -J file    also write the medians as JSON to file
  -K dir     keep every run's raw output in dir
  -A dir     run nothing: summarize the outputs kept earlier with -K dir (same -p)
  -T s       kill a run after s seconds (600)
  -O bytes   both programs' buffers start this many bytes past a page boundary (the perf
             programs' --buffer-offset): 16 is where glibc's malloc puts large blocks (0)
  -H heap    tutti's heap buffers: shared (default) are malloc's under tutti-run's shared
             heap (libtutti-heap.so: memory the other ranks map); private runs tutti-run
             --heap private with anonymous huge-page buffers (--alloc mmap), as Open MPI's.
             Open MPI's buffers are always anonymous memory with huge pages asked for
             (mpi_allreduce_perf --alloc mmap): its best, measured (docs/perf.md)
  -M         tutti's buffers from ncclMemAlloc (all_reduce_perf -R 1): memory the other
             ranks of the host map, so an all-reduce reads the peers' buffers in place instead
             of copying through the FIFOs (Open MPI's buffers stay as they are)
  -L         no memory-limit columns (skips the membw runs and the algorithm run)
  -R prio    run both programs under SCHED_FIFO priority prio (chrt -f; needs root): on a
             machine shared with other work this keeps the other processes off the two cores
             while a run lasts, for both systems alike (the kernel still leaves them 5%)
  -h         this text
EOF
  exit "${1:-0}"
}

build="" nranks=2 reps=5 minb=8 maxb=256M factor=2 iters=1000 iter_bytes=512M warmup=5
place=out json="" keep="" run_timeout=600 analyze="" rt="" memalloc=() memlimit=1 offset=0
heap=shared
while getopts "B:p:r:b:e:f:n:I:w:P:J:K:A:T:R:O:H:MLh" opt; do
  case $opt in
    B) build=$OPTARG ;; p) nranks=$OPTARG ;; r) reps=$OPTARG ;;
    b) minb=$OPTARG ;; e) maxb=$OPTARG ;; f) factor=$OPTARG ;;
    n) iters=$OPTARG ;; I) iter_bytes=$OPTARG ;; w) warmup=$OPTARG ;;
    P) place=$OPTARG ;; J) json=$OPTARG ;; K) keep=$OPTARG ;; A) analyze=$OPTARG ;;
    T) run_timeout=$OPTARG ;; R) rt=$OPTARG ;; M) memalloc=(-R 1) ;; L) memlimit=0 ;;
    O) offset=$OPTARG ;; H) heap=$OPTARG ;;
    h) usage 0 ;; *) usage 2 ;;
  esac
done
[[ $place == out || $place == in ]] || { echo "-P takes out or in" >&2; exit 2; }
[[ $heap == shared || $heap == private ]] || { echo "-H takes shared or private" >&2; exit 2; }
tutti_heap=(--heap "$heap") tutti_alloc=()
[[ $heap == shared ]] || tutti_alloc=(--alloc mmap)
[[ $reps =~ ^[1-9][0-9]*$ && $nranks =~ ^[1-9][0-9]*$ ]] || { echo "bad -r or -p" >&2; exit 2; }

if [[ -n $build ]]; then
  bindir=$build/bin
elif [[ -x $script_dir/all_reduce_perf ]]; then
  bindir=$script_dir
else
  bindir=$script_dir/../build/bin
fi
perf_args=(-b "$minb" -e "$maxb" -f "$factor" -n "$iters" --iter-bytes "$iter_bytes"
           -w "$warmup" -d float -o sum -c 0 -a 3) # -a 3: time = max over ranks
((offset == 0)) || perf_args+=(--buffer-offset "$offset")
[[ -x $PY ]] || { echo "$PY not found" >&2; exit 2; }
if [[ -z $analyze ]]; then
  progs=(tutti-run all_reduce_perf mpi_allreduce_perf)
  ((memlimit == 0)) || progs+=(membw memlimit)
  for prog in "${progs[@]}"; do
    [[ -x $bindir/$prog ]] || { echo "missing $bindir/$prog (build first, or -B)" >&2; exit 2; }
  done
  command -v mpirun >/dev/null || { echo "mpirun not found" >&2; exit 2; }
fi

if [[ -n $analyze ]]; then
  outdir=$analyze
  reps=$(find "$outdir" -maxdepth 1 -name 'tutti.*.txt' | wc -l)
  ((reps > 0)) || { echo "no tutti.*.txt in $outdir" >&2; exit 2; }
  perf_args=("(as recorded in $outdir)")
elif [[ -n $keep ]]; then
  mkdir -p "$keep"
  outdir=$keep
else
  outdir=$(mktemp -d)
  trap 'rm -rf "$outdir"' EXIT
fi

# Open MPI pinned to cores when there are enough (its own default), in its two configurations
# (run_ompi: tuned, run_ompic: default). tutti-run runs with its defaults (--bind auto), as a
# user types it; the algorithm run takes the same placement.
bind=(--bind-to core)
(( nranks <= $(nproc) )) || bind=(--bind-to none --oversubscribe)

rt_cmd=()
[[ -z $rt ]] || rt_cmd=(chrt -f "$rt")

run_tutti() {
  timeout -k 10 "$run_timeout" "${rt_cmd[@]}" "$bindir/tutti-run" -n "$nranks" "${tutti_heap[@]}" \
    -- "$bindir/all_reduce_perf" "${perf_args[@]}" "${tutti_alloc[@]}" "${memalloc[@]}"
}
run_ompi() {
  timeout -k 10 "$run_timeout" "${rt_cmd[@]}" mpirun -np "$nranks" --allow-run-as-root "${bind[@]}" \
    --mca btl_vader_single_copy_mechanism none \
    -x MALLOC_MMAP_THRESHOLD_=4000000000 -x MALLOC_TRIM_THRESHOLD_=4000000000 \
    "$bindir/mpi_allreduce_perf" "${perf_args[@]}" --alloc mmap
}
run_ompic() {
  timeout -k 10 "$run_timeout" "${rt_cmd[@]}" mpirun -np "$nranks" --allow-run-as-root "${bind[@]}" \
    "$bindir/mpi_allreduce_perf" "${perf_args[@]}" --alloc mmap
}

# Both libraries in one pair of processes, alternating blocks, for the sizes of the time target.
svm_args() {
  local m=()
  ((${#memalloc[@]} == 0)) || m=(-M)
  echo -b 8 -e 4K -f "$factor" -P "$place" "${m[@]}"
}
# small_vs_mpi exits 1 when a size fails the target: a result, not an error. Arguments: Open
# MPI's own settings (none: its default configuration).
run_svm() {
  local rc=0
  timeout -k 10 "$run_timeout" "${rt_cmd[@]}" mpirun -np "$nranks" --allow-run-as-root "${bind[@]}" \
    "$@" "$bindir/small_vs_mpi" $(svm_args) || rc=$?
  ((rc <= 1))
}
run_svmfifo() { run_svm --mca btl_vader_single_copy_mechanism none; }
run_svmcma() { run_svm; }

# The memory reference: one process copying, and as many as there are ranks at once, each
# over the working set of a rank's buffers (send and receive: the size copied; in place one
# buffer: half of it).
mcpy_fraction=1
[[ $place == in ]] && mcpy_fraction=0.5
run_mcpy1() {
  timeout -k 10 "$run_timeout" "${rt_cmd[@]}" "$bindir/membw" -p 1 --fraction "$mcpy_fraction" \
    "${perf_args[@]}"
}
run_mcpyn() {
  timeout -k 10 "$run_timeout" "${rt_cmd[@]}" "$bindir/membw" -p "$nranks" \
    --fraction "$mcpy_fraction" "${perf_args[@]}"
}
# The algorithm of every call, from the COLL lines of one short run (2 iterations per size).
run_algos() {
  local args=("${perf_args[@]}")
  args[7]=2 args[11]=1 # -n 2 -w 1 (positions in perf_args)
  timeout -k 10 "$run_timeout" "$bindir/tutti-run" -n "$nranks" "${tutti_heap[@]}" \
    -x TUTTI_DEBUG=INFO -x TUTTI_DEBUG_SUBSYS=COLL -- \
    "$bindir/all_reduce_perf" "${args[@]}" "${tutti_alloc[@]}" "${memalloc[@]}"
}

# run_one LIB REP: runs one program, its output in $outdir/LIB.REP.txt; stops on failure.
run_one() {
  local lib=$1 rep=$2 out="$outdir/$1.$2.txt" t0=$EPOCHREALTIME rc=0
  "run_$lib" >"$out" 2>&1 || rc=$?
  awk -v l="$lib" -v r="$rep" -v n="$reps" -v a="$t0" -v b="$EPOCHREALTIME" \
    'BEGIN { printf "  %-5s rep %d/%d: %5.1f s\n", l, r, n, b - a }' >&2
  if ((rc != 0)); then
    echo "$lib run $rep failed (exit $rc); last lines of $out:" >&2
    tail -n 20 "$out" >&2
    exit 2
  fi
}

if [[ -z $analyze ]]; then
  echo "# comparing all_reduce: $nranks ranks, ${perf_args[*]}, $reps repetitions${rt:+, under chrt -f $rt}${memalloc:+, tutti with ncclMemAlloc buffers (-R 1)}" >&2
  for ((rep = 1; rep <= reps; rep++)); do
    case $((rep % 3)) in
      1) order=(tutti ompi ompic) ;; 2) order=(ompi ompic tutti) ;; 0) order=(ompic tutti ompi) ;;
    esac
    ((memlimit == 0)) || order+=(mcpy1 mcpyn)
    for lib in "${order[@]}"; do run_one "$lib" "$rep"; done
  done
  if [[ -x $bindir/small_vs_mpi ]]; then
    run_one svmfifo 1
    run_one svmcma 1
  fi
  if ((memlimit)); then
    run_one algos 1
    sed -n 's/.*ncclAllReduce: opCount.* sendbuff \([^ ]*\) recvbuff \([^ ]*\) count \([0-9]*\) .* algo \([a-z0-9_]*\).*/\3 \1 \2 \4/p' \
      "$outdir/algos.1.txt" | awk '{ print $1, ($2 == $3), $4 }' | sort -u -k1,1n -k2,2n |
      "$bindir/memlimit" --coll all_reduce --nranks "$nranks" >"$outdir/memlimit.txt"
  fi
fi

"$PY" - "$outdir" "$reps" "$place" "$nranks" "$json" "${perf_args[*]}${memalloc:+ (tutti: -R 1)}" \
  "${#memalloc[@]}" <<'PYEOF'
import json, os, statistics, sys

outdir, reps, place, nranks, json_path, args, memalloc = sys.argv[1:8]
reps = int(reps)
if int(memalloc):  # buffers from ncclMemAlloc: busbw >= 2x Open MPI from 256 KiB to 256 MiB
    BW_TARGET = (256 << 10, 256 << 20, 2.0)
else:              # heap buffers: busbw >= 1.5x Open MPI from 64 KiB to 256 MiB
    BW_TARGET = (64 << 10, 256 << 20, 1.5)
TIME_TARGET = (8, 4 << 10)              # time <= Open MPI from 8 B to 4 KiB
# Columns of a result row (nccl-tests layout): size count type redop root, then time algbw
# busbw #wrong out-of-place, then the same in-place. Only the time is read: the printed busbw
# has two decimals, too few at small sizes, so busbw is recomputed from the time
# (busbw = size * 2(n-1)/n / time) and the busbw ratio is the inverse of the time ratio.
TIME_COL = 5 if place == "out" else 9
BUS_FACTOR = 2.0 * (int(nranks) - 1) / int(nranks)


def read_times(path):
    rows = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 13 or line.startswith("#") or not fields[0].isdigit():
                continue
            rows[int(fields[0])] = float(fields[TIME_COL])
    return rows


def busbw(size, time_us):
    return size * BUS_FACTOR / time_us / 1e3 if time_us > 0 else 0.0


def medians(lib):
    runs = [read_times(f"{outdir}/{lib}.{r}.txt") for r in range(1, reps + 1)]
    sizes = sorted(set.intersection(*(set(r) for r in runs)))
    out = {}
    for s in sizes:
        times = [r[s] for r in runs]
        med = statistics.median(times)
        out[s] = {"time_us": med, "busbw": busbw(s, med), "time_us_runs": times}
    return out


def verdicts(size, t, m):
    bw_ok = time_ok = None
    if BW_TARGET[0] <= size <= BW_TARGET[1]:
        bw_ok = t["busbw"] >= BW_TARGET[2] * m["busbw"]
    if TIME_TARGET[0] <= size <= TIME_TARGET[1]:
        time_ok = t["time_us"] <= m["time_us"]
    return bw_ok, time_ok


def word(ok):
    return "-" if ok is None else ("PASS" if ok else "FAIL")


def ratio(a, b):
    return a / b if b > 0 else float("inf")


def read_copy(path):
    """membw's rows: size, bytes copied, time (us), copy rate per process (GB/s), all
    processes (before --fraction: no bytes copied)."""
    rows = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) in (4, 5) and fields[0].isdigit():
                rows[int(fields[0])] = float(fields[-2])
    return rows


def copy_rates(lib):
    """Median memcpy rate per size (GB/s per process) of the membw runs, {} when absent."""
    try:
        runs = [read_copy(f"{outdir}/{lib}.{r}.txt") for r in range(1, reps + 1)]
    except OSError:
        return {}
    sizes = set.intersection(*(set(r) for r in runs)) if runs else set()
    return {s: statistics.median(r[s] for r in runs) for s in sizes}


def traffic():
    """{(bytes, in_place): (algo, copy bytes per busbw byte)} from memlimit's output."""
    out = {}
    try:
        with open(f"{outdir}/memlimit.txt") as f:
            for line in f:
                count, in_place, algo, size, _, _, _, k = line.split()
                out[(int(float(size)), int(in_place))] = (algo, float(k))
    except (OSError, ValueError):
        pass
    return out


def read_svm(path):
    """small_vs_mpi's rows: {size: (tutti us, MPI us, ratio, lo, hi)}, {} when absent."""
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 6 and fields[0].isdigit():
                    lo, hi = fields[4].split("-")
                    rows[int(fields[0])] = tuple(float(x) for x in fields[1:4]) + (float(lo),
                                                                                   float(hi))
    except (OSError, ValueError):
        return {}
    return rows


def same_process():
    """Per size of the time target: small_vs_mpi against Open MPI's faster configuration
    there (the one whose per-block ratio median is higher), {} when it did not run."""
    fifo, cma = read_svm(f"{outdir}/svmfifo.1.txt"), read_svm(f"{outdir}/svmcma.1.txt")
    out = {}
    for s in set(fifo) | set(cma):
        if not TIME_TARGET[0] <= s <= TIME_TARGET[1]:
            continue
        pick = max((x for x in ((fifo.get(s), "fifo"), (cma.get(s), "cma")) if x[0]),
                   key=lambda x: x[0][2])
        out[s] = pick
    return out


def best_of(a, b):
    """Open MPI at its best: per size the configuration with the lower median time."""
    out = {}
    for s in set(a) | set(b):
        pick = min((x for x in ((a.get(s), "fifo"), (b.get(s), "cma")) if x[0]),
                   key=lambda x: x[0]["time_us"])
        out[s] = dict(pick[0], config=pick[1])
    return out


tutti = medians("tutti")
# Outputs kept before the CMA configuration was measured (-A) have no ompic files.
have_cma = os.path.exists(f"{outdir}/ompic.1.txt")
ompi = best_of(medians("ompi"), medians("ompic") if have_cma else {})
mcpy1, mcpyn, moved = copy_rates("mcpy1"), copy_rates("mcpyn"), traffic()
limits = bool(moved and mcpyn)
sizes = sorted(set(tutti) & set(ompi))
if not sizes:
    sys.exit("no result rows to compare (see the raw outputs with -K)")
where = "out-of-place" if place == "out" else "in-place"
print(f"# all_reduce float sum, {nranks} ranks, {where}, median of {reps} runs each")
print(f"# perf args: {args}")
print("# ompi = Open MPI at its best per size: the faster median of its tuned FIFO (fifo) and its "
      "default CMA single copy (cma)" if have_cma else "# ompi = Open MPI's tuned FIFO only")
bw_col = f"bw>={BW_TARGET[2]:g}x"
bw_range = "{}-{}".format(*(f"{v >> 20}M" if v >= 1 << 20 else f"{v >> 10}K"
                            for v in BW_TARGET[:2]))
if limits:
    print(f"# memory limit: algo = what tutti ran; B/bus = bytes the busiest rank copies per byte "
          f"of busbw (its schedule); mcpy1, mcpy{nranks} = memcpy GB/s per process, 1 and "
          f"{nranks} processes at once, over {'half' if place == 'in' else 'all'} of each "
          f"size; limit = mcpy{nranks} / (B/bus); frac = tutti busbw / limit")
hdr = "#{:>11} {:>10} {:>8} {:>10} {:>8} {:>4} {:>8} {:>8} {:>8} {:>8}"
lim_hdr = " {:>8} {:>6} {:>7} {:>7} {:>7} {:>6}"
print(hdr.format("size", "tutti", "tutti", "ompi", "ompi", "ompi", "busbw", "time", bw_col,
                 "t<=ompi")
      + (lim_hdr.format("algo", "B/bus", "mcpy1", f"mcpy{nranks}", "limit", "frac") if limits else ""))
print(hdr.format("(B)", "(us)", "(GB/s)", "(us)", "(GB/s)", "cfg", "ratio", "ratio", bw_range,
                 "8B-4K")
      + (lim_hdr.format("", "", "(GB/s)", "(GB/s)", "(GB/s)", "") if limits else ""))
rows, counts = [], {"bw": [0, 0], "time": [0, 0]}
for s in sizes:
    t, m = tutti[s], ompi[s]
    bw_ok, time_ok = verdicts(s, t, m)
    for key, ok in (("bw", bw_ok), ("time", time_ok)):
        if ok is not None:
            counts[key][0] += ok
            counts[key][1] += 1
    t_r = ratio(t["time_us"], m["time_us"])
    bw_r = ratio(m["time_us"], t["time_us"])
    lim = ""
    row = {"bytes": s, "tutti": t, "ompi": m, "busbw_ratio": bw_r, "time_ratio": t_r,
           "busbw_target": word(bw_ok), "time_target": word(time_ok)}
    algo, k = moved.get((s, 1 if place == "in" else 0), ("?", 0.0))
    if limits and k > 0 and s in mcpyn:
        limit = mcpyn[s] / k
        lim = " {:>8} {:>6.2f} {:>7.2f} {:>7.2f} {:>7.2f} {:>6.1%}".format(
            algo, k, mcpy1.get(s, 0.0), mcpyn[s], limit, t["busbw"] / limit)
        row["memory_limit"] = {"algo": algo, "bytes_per_busbw_byte": k,
                               "memcpy_1_gbps": mcpy1.get(s), "memcpy_n_gbps": mcpyn[s],
                               "limit_busbw": limit, "fraction": t["busbw"] / limit}
    print("{:>12} {:>10.2f} {:>8.3f} {:>10.2f} {:>8.3f} {:>4} {:>8.2f} {:>8.2f} {:>8} {:>8}".format(
        s, t["time_us"], t["busbw"], m["time_us"], m["busbw"], m["config"], bw_r, t_r,
        word(bw_ok), word(time_ok)) + lim)
    rows.append(row)
print(f"# busbw >= {BW_TARGET[2]:g}x Open MPI ({bw_range}): {counts['bw'][0]}/{counts['bw'][1]} PASS")
print(f"# time <= Open MPI (8 B..4 KiB):         {counts['time'][0]}/{counts['time'][1]} PASS"
      " (medians of separate runs)")
svm = same_process()
if svm:
    print("# the time target in the same processes (small_vs_mpi: alternating blocks of calls, "
          "medians over blocks; ratio = tutti / Open MPI per block, 95 % interval)")
    print("#{:>11} {:>10} {:>10} {:>4} {:>8} {:>15} {:>8}".format(
        "size (B)", "tutti us", "ompi us", "cfg", "ratio", "95% interval", "t<=ompi"))
    passed = 0
    for s in sorted(svm):
        (tt, tm, r, lo, hi), cfg = svm[s]
        ok = hi <= 1.0
        passed += ok
        verdict = "PASS" if ok else ("FAIL" if lo > 1.0 else "?")
        print("{:>12} {:>10.3f} {:>10.3f} {:>4} {:>8.3f} {:>7.3f}-{:<7.3f} {:>8}".format(
            s, tt, tm, cfg, r, lo, hi, verdict))
        for row in rows:
            if row["bytes"] == s:
                row["same_process"] = {"tutti_us": tt, "ompi_us": tm, "config": cfg,
                                       "ratio": r, "interval": [lo, hi], "pass": ok}
    print(f"# time <= Open MPI (8 B..4 KiB):         {passed}/{len(svm)} PASS (same processes: "
          "the verdict that counts)")
    counts["time"] = [passed, len(svm)]
all_ok = all(c[0] == c[1] for c in counts.values())
if json_path:
    with open(json_path, "w") as f:
        json.dump({"collective": "all_reduce", "type": "float", "op": "sum", "nranks": int(nranks),
                   "place": place, "repetitions": reps, "perf_args": args,
                   "targets": {"busbw_ratio_min": BW_TARGET[2], "busbw_range": BW_TARGET[:2],
                               "time_range": TIME_TARGET},
                   "sizes": rows, "all_targets_pass": all_ok}, f, indent=1)
sys.exit(0 if all_ok else 1)
PYEOF
