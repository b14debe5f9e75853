#!/usr/bin/env python3
"""The tuner judged by tutti-sim over a grid of clusters and sizes (all-reduce).

For every point (nodes x ranks per node x NICs x size) tutti-sim simulates every registered
all-reduce algorithm (forced) and the library's automatic choice (-a auto: the tuner with the
cluster's constants); the pick is a hit when its simulated time is within --tol (10%) of the
fastest simulated algorithm. Prints one line per point that misses, a summary per cluster, and
writes every point to --json (for docs/simulator.md's study).

Runs with any Python 3 (standard library only), e.g.
    python3 perf/sim_grid.py -B build --json out/grid.json
    python3 perf/sim_grid.py -B build --nodes 1,8 --sizes 8,1M      # a smaller grid
Algorithms the simulator cannot run at a point (the full method over --max-steps, or not
applicable there) are left out of that point's fastest and listed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ALGOS = "ring,oneshot,hier,tree,rhd,rd,mring,direct"


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def fmt_size(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return "%d%s" % (b >> shift, unit)
    return str(b)


def run_point(args, nodes, ppn, nics, algos):
    cmd = [os.path.join(args.build, "bin", "tutti-sim"), "--nodes", str(nodes), "--ppn", str(ppn),
           "--nics", str(nics)] + args.cluster.split() + [
        "-c", "all_reduce", "-a", algos, "-b", str(args.sizes[0]), "-e", str(args.sizes[-1]),
        "-f", str(args.factor), "--max-steps", str(args.max_steps)]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    wall = time.time() - t0
    rows = {}  # size -> algo -> (us, picked)
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        size, algo = int(f[0]), f[4]
        if f[5] == "-":
            continue
        rows.setdefault(size, {})[algo] = (float(f[5]), f[8] if algo == "auto" else algo)
    return rows, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-B", "--build", default="build")
    ap.add_argument("--nodes", default="1,8,64,512,8192")
    ap.add_argument("--ppn", default="1,8")
    ap.add_argument("--nics", default="1,8")
    ap.add_argument("--sizes", default="8,1G", help="first,last (x --factor)")
    ap.add_argument("--factor", type=int, default=8)
    ap.add_argument("--cluster", default="--inter-gbps 400 --inter-lat-us 5 --intra-gbps 1000 "
                    "--intra-lat-us 1", help="tutti-sim options of the fabric")
    ap.add_argument("--max-steps", type=int, default=40000000)
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--json", help="write every point here")
    ap.add_argument("--algos", default=ALGOS, help="algorithms to force (default: %(default)s)")
    args = ap.parse_args()
    first, last = (parse_size(s) for s in args.sizes.split(","))
    args.sizes = [first, last]
    points, misses, hits = [], [], 0
    for nodes in (int(x) for x in args.nodes.split(",")):
        for ppn in (int(x) for x in args.ppn.split(",")):
            for nics in (int(x) for x in args.nics.split(",")):
                if nodes == 1 and (nics > 1 or ppn == 1):
                    continue  # one node: no network (NICs do not matter); one rank: nothing to do
                rows, wall = run_point(args, nodes, ppn, nics, args.algos + ",auto")
                ch = 0
                for size in sorted(rows):
                    r = rows[size]
                    forced = {a: v[0] for a, v in r.items() if a != "auto"}
                    if "auto" not in r or not forced:
                        continue
                    best = min(forced, key=forced.get)
                    us, pick = r["auto"]
                    ratio = us / forced[best]
                    p = {"nodes": nodes, "ppn": ppn, "nics": nics, "bytes": size, "pick": pick,
                         "pick_us": us, "best": best, "best_us": forced[best], "ratio": ratio,
                         "times": forced}
                    points.append(p)
                    if ratio > 1 + args.tol:
                        misses.append(p)
                        ch += 1
                        print("MISS %5d nodes x %d ranks, %d NIC(s), %6s: %s %.1f us, fastest %s "
                              "%.1f us (x%.2f)" % (nodes, ppn, nics, fmt_size(size), pick, us,
                                                   best, forced[best], ratio))
                    else:
                        hits += 1
                print("# %5d nodes x %d ranks, %d NIC(s): %d sizes, %d miss(es), %.1f s" %
                      (nodes, ppn, nics, len(rows), ch, wall), flush=True)
    print("%d points: %d within %.0f%% of the fastest, %d misses" %
          (hits + len(misses), hits, 100 * args.tol, len(misses)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cluster": args.cluster, "points": points}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
