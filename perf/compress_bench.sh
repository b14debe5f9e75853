#!/usr/bin/env bash
# compress_bench.sh: compressed all-reduces and compressed training on the namespace test bed
# (scripts/netns-cluster.sh): 2 hosts x 1 rank, links limited by tc tbf (1gbit). Needs root.
#
#   1. compress_perf: a SIZE fp32 all-reduce per compressor against the exact one, interleaved in
#      one run (median time, speedup, bytes sent per rank, error against the exact average).
#   2. -T: tutti-train (Fashion-MNIST CNN, same epochs) once per compressor: final test accuracy
#      and mean epoch time, with the compressed bytes per step from its log.
#
# Options: -B build dir (../build)  -s size (64M)  -r reps (5)  -R rate (1gbit)
#          -k compressors (none,bf16,fp16,int8,topk:0.01,powersgd:2; the first is the baseline)
#          -T epochs (0: no training runs)  -t list of compressors for training
#          -L train-limit (0: all 60000 images)
#          -P prio: run compress_perf under SCHED_RR priority prio (chrt -r): on a shared machine the
#             others' load then stops deciding the ratios (round robin, not FIFO: each rank has
#             two threads, the caller's and the network one, which must share a CPU)
# Every measurement holds /tmp/tutti-measure.lock (flock) so measurements never overlap.
set -euo pipefail
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src_dir=$(cd "$script_dir/.." && pwd)
build="$src_dir/build" size=64M reps=5 rate=1gbit kinds="none,bf16,fp16,int8,topk:0.01,powersgd:2"
epochs=0 tkinds="none,bf16,int8,topk:0.01,powersgd:2" limit=0 rt=()
while getopts "B:s:r:R:k:T:t:L:P:h" opt; do
  case $opt in
    B) build=$(cd "$OPTARG" && pwd) ;;
    s) size=$OPTARG ;;
    r) reps=$OPTARG ;;
    R) rate=$OPTARG ;;
    k) kinds=$OPTARG ;;
    T) epochs=$OPTARG ;;
    t) tkinds=$OPTARG ;;
    L) limit=$OPTARG ;;
    P) rt=(chrt -r "$OPTARG") ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
export TUTTI_NETNS_PREFIX=${TUTTI_NETNS_PREFIX:-compress15-}
bed="$src_dir/scripts/netns-cluster.sh"
run="$build/bin/tutti-run"
trap '"$bed" down' EXIT
"$bed" down
"$bed" up 2 --rate "$rate" >/dev/null

echo "## compress_perf, 2 hosts x 1 rank, links $rate, $size"
flock /tmp/tutti-measure.lock "${rt[@]}" "$run" --hosts h1,h2 "$build/bin/compress_perf" -s "$size" \
  -r "$reps" -k "$kinds"

[[ $epochs -gt 0 ]] || exit 0
echo "## tutti-train --model cnn --epochs $epochs --train-limit $limit, 2 hosts x 1 rank, links $rate"
printf '| compressor | test acc %% | mean epoch s | exposed comm s/epoch | MB sent per step per rank |\n|---|---|---|---|---|\n'
extra=()
[[ $limit -gt 0 ]] && extra=(--train-limit "$limit")
IFS=, read -ra tk <<<"$tkinds"
for k in "${tk[@]}"; do
  out=$(mktemp)
  flock /tmp/tutti-measure.lock "$run" --hosts h1,h2 "$build/bin/tutti-train" --model cnn \
    --epochs "$epochs" --compress "$k" "${extra[@]}" >"$out" 2>&1 || { cat "$out"; exit 1; }
  acc=$(grep -E '^epoch' "$out" | tail -1 | sed -E 's/.*test +([0-9.]+)%.*/\1/')
  secs=$(grep -E '^epoch' "$out" | sed -E 's/.*\| ([0-9.]+)s$/\1/' | awk '{s+=$1} END {printf "%.1f", s/NR}')
  exposed=$(grep -E '^epoch' "$out" | sed -E 's/.*exposed +([0-9.]+)s.*/\1/' | awk '{s+=$1} END {printf "%.1f", s/NR}')
  mb=$(grep -E 'MB sent per step' "$out" | tail -1 | sed -E 's/.*: ([0-9.]+) MB.*/\1/')
  printf '| %s | %s | %s | %s | %s |\n' "$k" "$acc" "$secs" "$exposed" "${mb:-exact}"
  grep -E '^epoch|MB sent' "$out" >&2
  rm -f "$out"
done
