#!/usr/bin/env bash
# compress_train.sh: the trainer (Fashion-MNIST CNN) per gradient compressor on the namespace test
# bed (scripts/netns-cluster.sh): 2 hosts x 1 rank, links limited by tc tbf (1gbit). Needs root.
#
#   accuracy: one run per compressor, the same epochs and images for all, under nice -n 15 and
#             not under the measurement lock (the arithmetic is deterministic: the load changes
#             the time, not the result); -j runs that many at once. Final test accuracy.
#   timing:   epoch time per compressor with steady-state compression (--compress-warmup 0),
#             --no-eval, -r repetitions interleaved across compressors, each run holding
#             /tmp/tutti-measure.lock under SCHED_RR priority 10 (round robin, not FIFO: each
#             rank has two threads, the trainer's and the communication one, sharing CPUs);
#             median epoch time, exposed communication and MB sent per step per rank.
#
# Options: -B build dir (../build)  -R rate (1gbit)  -k compressors (none,bf16,int8,topk:0.01,
#          powersgd:2; the first is the baseline)  -E epochs (2)  -L train-limit for accuracy
#          (0: all 60000)  -j parallel accuracy runs (1)  -l train-limit for timing (6000)
#          -r timing repetitions (3)  -A: accuracy only  -M: timing only
#          -o "extra tutti-train options" for both (e.g. "--optim sgd")  -O dir: keep every
#          run's output there  -X: accuracy runs one at a time under the lock and SCHED_RR
#          like the timing runs (their epoch times are then measurements too)
set -euo pipefail
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src_dir=$(cd "$script_dir/.." && pwd)
build="$src_dir/build" rate=1gbit kinds="none,bf16,int8,topk:0.01,powersgd:2" epochs=2 limit=0
jobs=1 tlimit=6000 reps=3 do_acc=1 do_time=1 extra="" keep="" locked=0
while getopts "B:R:k:E:L:j:l:r:AMXo:O:h" opt; do
  case $opt in
    B) build=$(cd "$OPTARG" && pwd) ;;
    R) rate=$OPTARG ;;
    k) kinds=$OPTARG ;;
    E) epochs=$OPTARG ;;
    L) limit=$OPTARG ;;
    j) jobs=$OPTARG ;;
    l) tlimit=$OPTARG ;;
    r) reps=$OPTARG ;;
    A) do_time=0 ;;
    M) do_acc=0 ;;
    o) extra=$OPTARG ;;
    O) keep=$OPTARG ;;
    X) locked=1 ;;
    *) sed -n '2,21p' "$0"; exit 2 ;;
  esac
done
export TUTTI_NETNS_PREFIX=${TUTTI_NETNS_PREFIX:-compress15t-}
bed="$src_dir/scripts/netns-cluster.sh"
run="$build/bin/tutti-run"
train="$build/bin/tutti-train"
if [[ -n $keep ]]; then out=$keep && mkdir -p "$out"; else out=$(mktemp -d); fi
trap '"$bed" down; [[ -n $keep ]] || rm -rf "$out"' EXIT
"$bed" down
"$bed" up 2 --rate "$rate" >/dev/null
IFS=, read -ra ks <<<"$kinds"
lim=()
[[ $limit -gt 0 ]] && lim=(--train-limit "$limit")
prio=(nice -n 15)
[[ $locked -eq 1 ]] && prio=(flock /tmp/tutti-measure.lock chrt -r 10) jobs=1
# shellcheck disable=SC2086 # $extra: options split on spaces on purpose
acc_run() { "${prio[@]}" "$run" --hosts h1,h2 "$train" --model cnn --epochs "$epochs" \
  "${lim[@]}" --compress "$1" $extra >"$out/acc.${1//[:,]/_}" 2>&1; }
field() { grep -E '^epoch' "$1" | tail -1 | sed -E "s/$2/\1/"; }

if [[ $do_acc -eq 1 ]]; then
  echo "## accuracy: tutti-train --model cnn --epochs $epochs ${lim[*]} $extra, 2 hosts x 1 rank, $rate"
  n=0
  for k in "${ks[@]}"; do
    acc_run "$k" &
    n=$((n + 1))
    if [[ $n -ge $jobs ]]; then wait -n; n=$((n - 1)); fi
  done
  wait
  base=""
  printf '| compressor | test acc %% | vs %s | mean epoch s | MB sent / step / rank |\n' "${ks[0]}"
  printf '|---|---|---|---|---|\n'
  for k in "${ks[@]}"; do
    f="$out/acc.${k//[:,]/_}"
    grep -E '^epoch|MB sent' "$f" >&2 || { cat "$f" >&2; exit 1; }
    a=$(field "$f" '.*test +([0-9.]+)%.*')
    secs=$(grep -E '^epoch' "$f" | sed -E 's/.*\| ([0-9.]+)s$/\1/' | awk '{s+=$1} END {print s/NR}')
    mb=$(grep -E 'MB sent per step' "$f" | sed -E 's/.*: ([0-9.]+) MB.*/\1/' | tr '\n' ' ' || true)
    [[ -z $base ]] && base=$a
    printf '| %s | %s | %+.2f | %.1f | %s |\n' "$k" "$a" "$(echo "$a - $base" | bc -l)" "$secs" \
      "${mb:-exact}"
  done
fi

if [[ $do_time -eq 1 ]]; then
  echo "## timing: --epochs 1 --train-limit $tlimit --no-eval --compress-warmup 0 $extra, $reps reps"
  for ((r = 0; r < reps; r++)); do
    for k in "${ks[@]}"; do
      f="$out/time.${k//[:,]/_}.$r"
      # shellcheck disable=SC2086
      flock /tmp/tutti-measure.lock chrt -r 10 "$run" --hosts h1,h2 "$train" --model cnn \
        --epochs 1 --train-limit "$tlimit" --no-eval --compress-warmup 0 --compress "$k" \
        $extra >"$f" 2>&1 || { cat "$f" >&2; exit 1; }
    done
  done
  med() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
  printf '| compressor | epoch s (median) | vs %s | exposed comm s | MB sent / step / rank |\n' "${ks[0]}"
  printf '|---|---|---|---|---|\n'
  base=""
  for k in "${ks[@]}"; do
    t=$(for f in "$out/time.${k//[:,]/_}".*; do field "$f" '.*\| ([0-9.]+)s$'; done | med)
    x=$(for f in "$out/time.${k//[:,]/_}".*; do field "$f" '.*exposed +([0-9.]+)s.*'; done | med)
    mb=$(grep -hE 'MB sent per step' "$out/time.${k//[:,]/_}.0" | sed -E 's/.*: ([0-9.]+) MB.*/\1/' ||
      true) # none: no such line
    [[ -z $base ]] && base=$t
    printf '| %s | %s | %.2fx | %s | %s |\n' "$k" "$t" "$(echo "$base / $t" | bc -l)" "$x" \
      "${mb:-exact}"
  done
fi
