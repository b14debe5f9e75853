#!/usr/bin/env bash
# compare_torch.sh: tutti-train against PyTorch DistributedDataParallel, measured in one go on
# this machine (the machines are shared and noisy, so only ratios measured side by side mean
# anything).
#
# For each model it runs, interleaved and R times each (the order rotates between
# repetitions), with the same model, per-rank batch and optimizer, no augmentation, no eval:
#   tutti1  tutti-train, 1 rank                 (under tutti-run -n 1)
#   tutti2  tutti-train, 2 ranks                (under tutti-run -n 2)
#   torch2  trainer/torch_ddp.py, 2 ranks       (PyTorch DDP over Gloo, torchrun-style env)
# and prints the median samples/s (steady state: the first 5 steps of each run are left out)
# and the ratios against the targets:
#   tutti2 >= 1.5 x torch2        tutti2 >= 1.7 x tutti1
# It also prints samples per CPU-second per rank (CPU time of all of a rank's threads, its
# communication included): on a loaded machine, where wall-clock figures mostly measure the
# other jobs, this is the part of the comparison that still holds. The load average before and
# after is printed; ratios taken at a load above ~1 say little about the targets.
# Every process runs one compute thread (OpenBLAS, OpenMP and torch intra/inter-op threads set
# to 1). Debian 12's OpenBLAS does not recognize the newest Intel CPUs and falls back to SSE3
# kernels: tutti-train corrects that itself (see train.c); for torch, whose nn.Linear goes
# through the same libblas, this script exports the same OPENBLAS_CORETYPE, so both sides use
# the same sgemm.
#
# Needs Debian's python3-torch (PyTorch 1.13) and /usr/bin/python3.
# Exit status: 0 all targets hold, 1 some target fails, 2 error.
set -euo pipefail

PY=/usr/bin/python3 # Debian's python3; the first python3 on PATH may be a bare one
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  cat <<USAGE
usage: $(basename "$0") [options]
  -B dir     build directory holding bin/ (default: ../build-trainer or ../build)
  -m list    models, comma-separated (cnn,mlp)
  -b n       per-rank batch (64)
  -o name    optimizer: adamw or sgd (adamw)
  -s n       measured steps per run: cnn (60), mlp (400)
  -r n       repetitions of each run (3)
  -x args    more tutti-train options for both tutti runs (e.g. "--no-shard-optim")
  -K dir     keep every run's output in dir
  -h         this text
USAGE
  exit "${1:-0}"
}

build="" models=cnn,mlp batch=64 optim=adamw steps="" reps=3 keep="" extra=""
while getopts "B:m:b:o:s:r:x:K:h" opt; do
  case $opt in
    B) build=$OPTARG ;; m) models=$OPTARG ;; b) batch=$OPTARG ;; o) optim=$OPTARG ;;
    s) steps=$OPTARG ;; r) reps=$OPTARG ;; x) extra=$OPTARG ;; K) keep=$OPTARG ;;
    h) usage 0 ;; *) usage 2 ;;
  esac
done
if [[ -z $build ]]; then
  for b in "$script_dir/../build-trainer" "$script_dir/../build"; do
    [[ -x $b/bin/tutti-train ]] && { build=$b; break; }
  done
fi
[[ -n $build && -x $build/bin/tutti-train && -x $build/bin/tutti-run ]] ||
  { echo "compare_torch: no tutti-train/tutti-run under -B ${build:-?}/bin" >&2; exit 2; }
$PY -c 'import torch' 2>/dev/null ||
  { echo "compare_torch: $PY cannot import torch: apt-get install python3-torch" >&2; exit 2; }

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# torch gets the OpenBLAS kernels tutti-train runs with (see blas_pick_kernels in train.c)
OPENBLAS_CORETYPE=$("$build/bin/tutti-train" --blas-info) || exit 2
export OPENBLAS_CORETYPE
out_dir=${keep:-$(mktemp -d)}
mkdir -p "$out_dir"
[[ -n $keep ]] || trap 'rm -rf "$out_dir"' EXIT

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run_one KIND MODEL STEPS OUT: one run, its steady samples/s appended to OUT.values
run_one() {
  local kind=$1 model=$2 nsteps=$3 out=$4 log
  log="$out.$(date +%s%N).log"
  local common=(--model "$model" --batch "$batch" --optim "$optim" --augment none --no-eval
                --epochs 1 --max-steps $((nsteps + 5)) $extra)
  case $kind in
    tutti1) timeout 900 "$build/bin/tutti-run" -n 1 "$build/bin/tutti-train" "${common[@]}" >"$log" 2>&1 ;;
    tutti2) timeout 900 "$build/bin/tutti-run" -n 2 "$build/bin/tutti-train" "${common[@]}" >"$log" 2>&1 ;;
    torch2)
      local port pids=() r
      port=$(free_port)
      for r in 0 1; do
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          timeout 900 $PY "$script_dir/torch_ddp.py" --model "$model" --batch "$batch" \
          --optim "$optim" --steps "$nsteps" --warmup 5 >>"$log" 2>&1 &
        pids+=($!)
      done
      for r in "${pids[@]}"; do wait "$r"; done ;;
  esac || { echo "compare_torch: $kind $model failed, see $log" >&2; cat "$log" >&2; exit 2; }
  grep -o '[0-9.]* samples/s after the first' "$log" | tail -1 | cut -d' ' -f1 >>"$out.values"
  grep -o '[0-9.]* samples per CPU-second' "$log" | tail -1 | cut -d' ' -f1 >>"$out.cpu"
}

median() { sort -g "$1" | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

status=0
kinds=(tutti1 tutti2 torch2)
printf "compare_torch: %s, batch %d per rank, %s, %d repetitions, OPENBLAS_CORETYPE=%s%s\n" \
  "$models" "$batch" "$optim" "$reps" "${OPENBLAS_CORETYPE:-auto}" "${extra:+, tutti-train $extra}"
echo "  load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for model in ${models//,/ }; do
  nsteps=${steps:-$([[ $model == cnn ]] && echo 60 || echo 400)}
  for k in "${kinds[@]}"; do rm -f "$out_dir/$model.$k.values" "$out_dir/$model.$k.cpu"; done
  for ((i = 0; i < reps; i++)); do
    for ((j = 0; j < ${#kinds[@]}; j++)); do
      k=${kinds[$(((i + j) % ${#kinds[@]}))]}
      run_one "$k" "$model" "$nsteps" "$out_dir/$model.$k"
    done
  done
  declare -A med cpu
  for k in "${kinds[@]}"; do
    med[$k]=$(median "$out_dir/$model.$k.values") cpu[$k]=$(median "$out_dir/$model.$k.cpu")
  done
  printf "\n%s (%d measured steps per run)\n" "$model" "$nsteps"
  printf "          samples/s: median [all runs]     samples per CPU-second per rank: median\n"
  for k in "${kinds[@]}"; do
    printf "  %-7s %8.0f  [%-24s] %8.0f\n" "$k" "${med[$k]}" \
      "$(paste -sd' ' "$out_dir/$model.$k.values")" "${cpu[$k]}"
  done
  read -r r_torch r_scale < <(awk -v a="${med[tutti2]}" -v b="${med[torch2]}" -v c="${med[tutti1]}" \
    'BEGIN {printf "%.2f %.2f\n", a / b, a / c}')
  ok_torch=$(awk -v r="$r_torch" 'BEGIN {print (r >= 1.5) ? "PASS" : "FAIL"}')
  ok_scale=$(awk -v r="$r_scale" 'BEGIN {print (r >= 1.7) ? "PASS" : "FAIL"}')
  printf "  tutti 2 ranks / torch DDP 2 ranks = %.2fx  target >= 1.5x: %s\n" "$r_torch" "$ok_torch"
  printf "  tutti 2 ranks / tutti 1 rank      = %.2fx  target >= 1.7x: %s\n" "$r_scale" "$ok_scale"
  [[ $ok_torch == PASS && $ok_scale == PASS ]] || status=1
done
echo "  load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
