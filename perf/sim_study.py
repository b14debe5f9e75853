#!/usr/bin/env python3
"""busbw against ranks for every all-reduce algorithm, simulated by tutti-sim, plotted with gnuplot.

For each size (-s, default 8 B, 1 MiB, 1 GiB) tutti-sim sweeps 1 to --max-nodes nodes of --ppn
ranks (--scale-to) on the fabric given by --cluster, with every algorithm forced and the
library's automatic choice; one panel per size, a line per algorithm, the tuner's pick at each
rank count marked with a circle on the line of the algorithm it picked. Points the simulator
cannot run (a full simulation over --max-steps) are missing from their line.

    python3 perf/sim_study.py -B build -o docs/sim_study.png --data out/study.txt
Runs with any Python 3 (standard library only) and gnuplot.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ALGOS = ["ring", "hier", "tree", "rhd", "rd", "oneshot", "direct", "mring"]
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def sweep(args, size):
    cmd = [os.path.join(args.build, "bin", "tutti-sim"), "--nodes", "1", "--ppn", str(args.ppn),
           "--nics", str(args.nics)] + args.cluster.split() + [
        "-c", "all_reduce", "-a", ",".join(args.algos + ["auto"]), "-b", size, "--scale-to",
        str(args.max_nodes), "--max-steps", str(args.max_steps)]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    rows = []  # (ranks, algo, us, busbw, picked, sim seconds)
    for line in out.splitlines():
        f = line.split()
        if line.startswith("#") or len(f) < 9 or f[5] == "-":
            continue
        picked = f[8] if f[4] == "auto" else ""
        n, us = int(f[3]), float(f[5])  # busbw from the time (tutti-sim prints 3 decimals)
        busbw = int(f[0]) / (us * 1e3) * 2 * (n - 1) / n if us > 0 else 0
        rows.append((n, f[4], us, busbw, picked, float(f[-1])))
    return rows, time.time() - t0


def plot(args, data):
    tmp = tempfile.mkdtemp(prefix="sim_study.")
    lines = ["set terminal pngcairo size %s font ',10'" % args.size, "set output '%s'" % args.o,
             "set multiplot layout 1,%d title '%s'" % (len(data), args.title),
             "set logscale xy 2", "set xlabel 'ranks'", "set ylabel 'busbw (GB/s)'",
             "set key bottom left font ',8'", "set grid", "set format x '%g'"]
    for size, rows in data:
        plots = []
        for a in args.algos:
            i = ALGOS.index(a) if a in ALGOS else len(ALGOS) - 1
            pts = [(r[0], r[3]) for r in rows if r[1] == a and r[3] > 0]
            if not pts:
                continue
            path = os.path.join(tmp, "%s_%s.dat" % (size, a))
            with open(path, "w") as f:
                f.writelines("%d %g\n" % p for p in pts)
            plots.append("'%s' w lp lc rgb '%s' pt 7 ps 0.4 title '%s'" % (path, COLORS[i], a))
        picks = [(r[0], r[3]) for r in rows if r[1] == "auto" and r[3] > 0]
        path = os.path.join(tmp, "%s_auto.dat" % size)
        with open(path, "w") as f:
            f.writelines("%d %g\n" % p for p in picks)
        plots.append("'%s' w p lc rgb 'black' pt 6 ps 1.6 title 'tuner pick'" % path)
        lines += ["set title 'all-reduce %s'" % size, "plot " + ", ".join(plots)]
    lines.append("unset multiplot")
    script = os.path.join(tmp, "plot.gp")
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    subprocess.run(["gnuplot", script], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-B", "--build", default="build")
    ap.add_argument("-o", default="sim_study.png")
    ap.add_argument("-s", "--sizes", default="8,1M,1G")
    ap.add_argument("--ppn", type=int, default=8)
    ap.add_argument("--nics", type=int, default=8)
    ap.add_argument("--max-nodes", type=int, default=8192)
    ap.add_argument("--max-steps", type=int, default=40000000)
    ap.add_argument("--cluster", default="--inter-gbps 400 --inter-lat-us 5 --intra-gbps 1000 "
                    "--intra-lat-us 1 --overhead-us 0.5")
    ap.add_argument("--title", default="tutti-sim: 8 ranks per node, 8 NICs of 400 Gbit/s (5 us) "
                    "per node, shm 1000 Gbit/s (1 us), 0.5 us per piece")
    ap.add_argument("--size", default="1500,480", help="PNG size W,H")
    ap.add_argument("--data", help="also write the rows here (text)")
    ap.add_argument("--algos", default=",".join(ALGOS), help="algorithms (default: %(default)s)")
    args = ap.parse_args()
    args.algos = args.algos.split(",")
    data = []
    out = open(args.data, "w") if args.data else None
    for size in args.sizes.split(","):
        rows, wall = sweep(args, size)
        data.append((size, rows))
        print("# %s: %d rows, %.1f s" % (size, len(rows), wall), flush=True)
        for r in rows:
            line = "%s %d %s %.2f %.6g %s %.2f" % (size, *r)
            print(line)
            if out:
                out.write(line + "\n")
    if out:
        out.close()
    plot(args, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
