#!/usr/bin/env bash
# compare_builds.sh: two builds of tutti side by side (before / after a change), measured in one
# interleaved run on the same machine, because only a ratio measured together means anything on
# a shared machine.
#
# Runs all_reduce_perf (or another collective's program, -c) of build A and of build B under their
# own tutti-run, alternating the order every repetition (A B, B A, A B, ...), so repetition i is
# a pair of runs seconds apart.
# Per size it prints the median time of each build, and the median of the pair ratios (B's busbw
# / A's busbw within pair i) with a distribution-free 95 % confidence interval (order statistics
# of the binomial). A machine whose speed drifts between runs moves both runs of a pair alike, so
# the pair ratios spread less than the two builds' times do. Each pair also records the machine's
# state: the mean of both builds' time at the smallest size (use -b 8); pairs at or below -s
# microseconds count as "fast", the others "slow", and the pair-ratio median is given per state.
# Verdict per size: "ok" when the interval's lower end is at least 1 - t/100, LOSS when its
# upper end is below it, "?" when the interval straddles it (more pairs needed). Exit status:
# 0 no size lost, 1 some size lost (LOSS), 2 error.
set -euo pipefail
PY=/usr/bin/python3 # Debian's python3 (any python3 with the standard library would do)

usage() {
  cat <<EOF2
usage: $(basename "$0") -A build_a -B build_b [options] [-- perf program options]
  -A dir, -B dir   the two build directories (each holds bin/)
  -c coll          the perf program: all_reduce (default), all_gather, reduce_scatter, ...
                   (bin/<coll>_perf of each build)
  -p n             ranks (2)      -r n   repetitions of each (5)
  -t pct           a loss beyond this many percent is reported (5)
  -R prio          run under SCHED_FIFO priority prio (chrt -f; root): keeps other work off
                   the CPUs while a run lasts, for both builds alike
  -P out|in        compare the out-of-place (default) or in-place times
  -s us            state threshold: a pair whose smallest-size time is at most this is "fast"
                   (0.4)
  -x 'VAR=v ...'   environment settings for build A's runs only (e.g. TUTTI_CMA_MIN_BYTES=64K);
  -y 'VAR=v ...'   for B's: compare settings of one build with -A and -B the same directory
  -o dir           keep every run's output in dir (A.i.txt, B.i.txt) for a later look
  -a               no runs: report again on the outputs kept in -o dir (e.g. with -P in);
                   -o dir1,dir2,... pools the pairs of several runs, each run one block; the
                   header names the kept runs' arguments, settings and builds (dir/run.txt)
perf program options default to: -b 8 -e 256M -f 4 -n 200 -w 5 -c 0 --iter-bytes 256M
EOF2
  exit "${1:-0}"
}

coll=all_reduce a="" b="" nranks=2 reps=5 thresh=5 rt="" place=out state_us=0.4 env_a="" env_b=""
keep="" again=0
while getopts "A:B:c:p:r:t:R:P:s:x:y:o:ah" opt; do
  case $opt in
    A) a=$OPTARG ;; B) b=$OPTARG ;; c) coll=$OPTARG ;; p) nranks=$OPTARG ;; r) reps=$OPTARG ;;
    t) thresh=$OPTARG ;; R) rt=$OPTARG ;; P) place=$OPTARG ;; s) state_us=$OPTARG ;;
    x) env_a=$OPTARG ;; y) env_b=$OPTARG ;; o) keep=$OPTARG ;; a) again=1 ;; h) usage 0 ;;
    *) usage 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ -n $a && -n $b ]] || usage 2
perf_args=("$@")
((${#perf_args[@]})) || perf_args=(-b 8 -e 256M -f 4 -n 200 -w 5 -c 0 --iter-bytes 256M)
rt_cmd=()
[[ -z $rt ]] || rt_cmd=(chrt -f "$rt")
bind=(--bind core)
((nranks <= $(nproc))) || bind=(--bind none)
if [[ -n $keep ]]; then
  out=$keep
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

[[ $again == 0 || -n $keep ]] || usage 2
# what the runs were, for a report again (-a) from the outputs alone: the perf program's arguments,
# each build's settings and each build, one per line
((again)) || printf '%s\n' "${perf_args[*]}" "$env_a" "$env_b" "$a" "$b" >"$out/run.txt"
((again)) || for ((rep = 1; rep <= reps; rep++)); do
  if ((rep % 2)); then order=(A B); else order=(B A); fi
  for which in "${order[@]}"; do
    dir=$a settings=$env_a
    [[ $which == B ]] && dir=$b settings=$env_b
    read -r -a env_args <<<"$settings"
    timeout -k 10 600 env ${env_args[@]+"${env_args[@]}"} "${rt_cmd[@]}" "$dir/bin/tutti-run" -n "$nranks" "${bind[@]}" -- \
      "$dir/bin/${coll}_perf" "${perf_args[@]}" >"$out/$which.$rep.txt" 2>&1 ||
      { echo "compare_builds: build $which failed, rep $rep:" >&2; tail -5 "$out/$which.$rep.txt" >&2; exit 2; }
    echo "  build $which rep $rep/$reps done" >&2
  done
done

"$PY" - "$out" "$reps" "$place" "$thresh" "$a" "$b" "$state_us" "$env_a" "$env_b" \
  "${perf_args[*]}" "$again" "$coll" <<'PYEOF'
import math, os, re, statistics, sys
out, reps, place, thresh, a, b, state_us, env_a, env_b, args, again, coll = sys.argv[1:13]
reps, thresh, state_us = int(reps), float(thresh), float(state_us)
col = 5 if place == "out" else 9  # nccl-tests columns: time of out-of-place, of in-place

short = []  # the perf programs' "# shortest timed window: <ms> ms at <size> B" notes

def run(d, which, r):
    rows = {}
    for line in open(f"{d}/{which}.{r}.txt"):
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():
            rows[int(f[0])] = float(f[col])
        elif m := re.match(r"# shortest timed window: ([0-9.]+) ms at ([0-9]+) B", line):
            short.append((float(m.group(1)), int(m.group(2))))
    return rows

def pairs_of(d):
    """The pairs kept in d (A.i.txt and B.i.txt, i = 1, 2, ...)."""
    n = 0
    while os.path.exists(f"{d}/A.{n + 1}.txt") and os.path.exists(f"{d}/B.{n + 1}.txt"):
        n += 1
    return n

def median_ci(x):
    """Median of x and a distribution-free 95 % interval: [x(k), x(n+1-k)] in sorted order, k
    the largest rank with P(Binomial(n, 1/2) < k) <= 2.5 % (None where n is too small)."""
    x, n = sorted(x), len(x)
    k, below = 0, 0.0
    while k < n and below + math.comb(n, k) / 2**n <= 0.025:
        below += math.comb(n, k) / 2**n
        k += 1
    ci = (x[k - 1], x[n - k]) if k >= 1 else (None, None)
    return statistics.median(x), ci

# Each directory is one block (one invocation: pairs minutes apart from another block's).
dirs = out.split(",")
blocks = [(d, pairs_of(d) if again == "1" else reps) for d in dirs]
if not all(n for d, n in blocks):
    print(f"compare_builds: no pairs (A.1.txt, B.1.txt) in {[d for d, n in blocks if not n]}",
          file=sys.stderr)
    sys.exit(2)
# Reported again: the arguments, settings and builds the kept runs had (run.txt), not this
# invocation's; where the blocks had different ones, each block's.
def recorded(d):
    if not os.path.exists(f"{d}/run.txt"):
        return ("(not recorded)",) * 5
    return tuple((open(f"{d}/run.txt").read().split("\n") + [""] * 5)[:5])

def each_block(kept, i):
    values = [k[i] for k in kept]
    return values[0] if len(set(values)) == 1 else " | ".join(values)

if again == "1":
    kept = [recorded(d) for d, n in blocks]
    if any(k[0] != "(not recorded)" for k in kept):
        args, env_a, env_b, ka, kb = (each_block(kept, i) for i in range(5))
        a, b = ka or a, kb or b
ra = [run(d, "A", r) for d, n in blocks for r in range(1, n + 1)]
rb = [run(d, "B", r) for d, n in blocks for r in range(1, n + 1)]
block_of = [k for k, (d, n) in enumerate(blocks) for r in range(n)]
reps = len(ra)
sizes = sorted(set.intersection(*(set(x) for x in ra + rb)))
small = sizes[0]
state = ["fast" if (x[small] + y[small]) / 2 <= state_us else "slow" for x, y in zip(ra, rb)]
nfast = state.count("fast")
limit = 1 - thresh / 100

print(f"# {coll}_perf {args}, {'out-of-place' if place == 'out' else 'in-place'}, "
      f"{reps} interleaved pairs")
print(f"# A = {a}{'  [' + env_a + ']' if env_a else ''}")
print(f"# B = {b}{'  [' + env_b + ']' if env_b else ''}")
print(f"# state per pair (mean {small} B time, fast <= {state_us} us): {nfast} fast, "
      f"{reps - nfast} slow: {''.join(s[0] for s in state)}")
print(f"# ratio = B busbw / A busbw of one pair; verdict against {limit:.2f} on the 95 % interval")
if short:
    ms, size = min(short)
    print(f"# note: runs timed a size over as little as {ms} ms ({size} B): small sizes' ratios "
          "from windows under 20 ms can mislead; raise -n")
if len(blocks) > 1:
    print(f"# {len(blocks)} blocks (runs) of {', '.join(str(n) for d, n in blocks)} pairs; 'blocks': "
          "each block's median ratio, lowest..highest (a spread wider than the interval means "
          "the runs differ by more than the pairs within a run)")
print(f"# {'size':>9} {'A us':>9} {'B us':>9} {'ratio med':>9} {'95% CI':>13} {'fast med':>8} "
      f"{'slow med':>8} verdict{'  blocks' if len(blocks) > 1 else ''}")
lost = False
for s in sizes:
    pairs = [x[s] / y[s] for x, y in zip(ra, rb) if y[s] > 0]
    med, (lo, hi) = median_ci(pairs)
    by = {st: [p for p, t in zip(pairs, state) if t == st] for st in ("fast", "slow")}
    sm = {st: f"{statistics.median(v):.3f}" if v else "-" for st, v in by.items()}
    ta = statistics.median(x[s] for x in ra)
    tb = statistics.median(y[s] for y in rb)
    verdict = "?" if lo is None or (lo < limit <= hi) else ("ok" if lo >= limit else "LOSS")
    lost |= verdict == "LOSS"
    ci = f"{lo:.3f}-{hi:.3f}" if lo is not None else "-"
    bm = [statistics.median(p for p, k in zip(pairs, block_of) if k == b)
          for b in range(len(blocks))]
    spread = f"  {min(bm):.3f}..{max(bm):.3f}" if len(blocks) > 1 else ""
    da, db = (3 if t < 1 else 2 for t in (ta, tb))  # as the perf programs print them
    print(f"  {s:>9} {ta:>9.{da}f} {tb:>9.{db}f} {med:>9.3f} {ci:>13} {sm['fast']:>8} "
          f"{sm['slow']:>8} {verdict:<7}{spread}")
sys.exit(1 if lost else 0)
PYEOF
