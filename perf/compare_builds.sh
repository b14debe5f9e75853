#!/usr/bin/env bash
# compare_builds.sh: two builds of tutti side by side (before / after a change), measured in one
# interleaved run on the same machine, because only a ratio measured together means anything on
# a shared machine.
#
# Runs all_reduce_perf of build A and of build B under their own tutti-run, alternating the
# order every repetition, and prints per size the median time of each and B's busbw / A's
# busbw, with LOSS where B is more than -t percent slower. Exit status: 0 no loss beyond the
# threshold, 1 some size lost, 2 error.
set -euo pipefail
PY=/usr/bin/python3 # Debian's python3 (any python3 with the standard library would do)

usage() {
  cat <<EOF2
usage: $(basename "$0") -A build_a -B build_b [options] [-- all_reduce_perf options]
  -A dir, -B dir   the two build directories (each holds bin/)
  -p n             ranks (2)      -r n   repetitions of each (5)
  -t pct           a loss beyond this many percent is reported (5)
  -R prio          run under SCHED_FIFO priority prio (chrt -f; root): keeps other work off
                   the CPUs while a run lasts, for both builds alike
  -P out|in        compare the out-of-place (default) or in-place times
all_reduce_perf options default to: -b 8 -e 256M -f 4 -n 200 -w 5 -c 0 --iter-bytes 256M
EOF2
  exit "${1:-0}"
}

a="" b="" nranks=2 reps=5 thresh=5 rt="" place=out
while getopts "A:B:p:r:t:R:P:h" opt; do
  case $opt in
    A) a=$OPTARG ;; B) b=$OPTARG ;; p) nranks=$OPTARG ;; r) reps=$OPTARG ;; t) thresh=$OPTARG ;;
    R) rt=$OPTARG ;; P) place=$OPTARG ;; h) usage 0 ;; *) usage 2 ;;
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
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for ((rep = 1; rep <= reps; rep++)); do
  if ((rep % 2)); then order=(A B); else order=(B A); fi
  for which in "${order[@]}"; do
    dir=$a
    [[ $which == B ]] && dir=$b
    timeout -k 10 600 "${rt_cmd[@]}" "$dir/bin/tutti-run" -n "$nranks" "${bind[@]}" -- \
      "$dir/bin/all_reduce_perf" "${perf_args[@]}" >"$out/$which.$rep.txt" 2>&1 ||
      { echo "compare_builds: build $which failed, rep $rep:" >&2; tail -5 "$out/$which.$rep.txt" >&2; exit 2; }
    echo "  build $which rep $rep/$reps done" >&2
  done
done

"$PY" - "$out" "$reps" "$place" "$thresh" "$a" "$b" "${perf_args[*]}" <<'PYEOF'
import statistics, sys
out, reps, place, thresh, a, b, args = sys.argv[1:8]
reps, thresh = int(reps), float(thresh)
col = 5 if place == "out" else 9  # nccl-tests columns: time of out-of-place, of in-place

def times(which):
    runs = []
    for r in range(1, reps + 1):
        rows = {}
        for line in open(f"{out}/{which}.{r}.txt"):
            f = line.split()
            if len(f) >= 13 and f[0].isdigit():
                rows[int(f[0])] = float(f[col])
        runs.append(rows)
    sizes = sorted(set.intersection(*(set(x) for x in runs)))
    return {s: statistics.median(x[s] for x in runs) for s in sizes}

ta, tb = times("A"), times("B")
print(f"# all_reduce_perf {args}, {place} of place, medians of {reps} interleaved runs")
print(f"# A = {a}\n# B = {b}")
print(f"# {'size':>10} {'A us':>10} {'B us':>10} {'B/A busbw':>10}")
lost = False
for s in sorted(set(ta) & set(tb)):
    ratio = ta[s] / tb[s] if tb[s] > 0 else 0.0  # busbw ratio = inverse time ratio
    bad = ratio < 1 - thresh / 100
    lost |= bad
    print(f"  {s:>10} {ta[s]:>10.2f} {tb[s]:>10.2f} {ratio:>10.3f}{'  LOSS' if bad else ''}")
sys.exit(1 if lost else 0)
PYEOF
