#!/usr/bin/env bash
# The prepared GPU check (docs/gpu.md): builds the CUDA variant, then on a GPU machine runs the
# GPU tests and benchmarks and writes every result to one file (about 6 minutes with the build
# on a 16-core machine; only the targets below are built). It fails (exit 1) on any failed
# step or missed target, and says NOT RUN for what the machine lacks (nccl-tests sources, a
# CUDA-enabled PyTorch).
#
#   tests/gpu/run.sh [-o RESULTS_FILE] [--build-only]
#
# TUTTI_GPU_BUILD_DIR overrides the build folder (default build-gpu/).
# RESULTS_FILE defaults to $OUT/gpu-results.txt when $OUT is set, else build-gpu/gpu-results.txt.
# Exit status: 0 all passed; 1 a step failed (the file says which); 3 no GPU (built only).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
build=${TUTTI_GPU_BUILD_DIR:-$root/build-gpu}
results=${OUT:+$OUT/gpu-results.txt}
results=${results:-$build/gpu-results.txt}
build_only=0
while (($#)); do
  case $1 in
    -o) results=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "usage: tests/gpu/run.sh [-o RESULTS_FILE] [--build-only]" >&2; exit 2 ;;
  esac
done
mkdir -p "$build" "$(dirname "$results")"
: >"$results"
failed=0
log() { echo "$*" | tee -a "$results"; }
# step NAME CMD...: runs CMD, its output into the results file, and records pass/fail.
step() {
  local name=$1; shift
  log "=== $name: $*"
  local t0=$SECONDS
  "$@" >>"$results" 2>&1
  local rc=$?
  log "=== $name: $([ $rc = 0 ] && echo PASS || echo "FAIL (exit $rc)") in $((SECONDS - t0)) s"
  [ $rc = 0 ] || failed=1
  return $rc
}

log "tutti GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)
step configure cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTUTTI_CUDA=ON \
  -DTUTTI_BUILD_TESTS=ON -DTUTTI_BUILD_PERF=ON || { log "build failed"; exit 1; }
step build cmake --build "$build" -j"$jobs" --target tutti nccl_compat tutti_cuda \
  test_gpu_kernels gpu_memcpy_bw gpu_coll test_cuda_driver test_stream_path test_p2p_protocol \
  all_reduce_perf tutti-run tutti-train || { log "build failed"; exit 1; }
bin=$build/bin
if ((build_only)); then log "built only (--build-only)"; exit 0; fi

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  log "no GPU on this machine (nvidia-smi -L fails): the CUDA variant is built, nothing ran on a GPU"
  exit 3
fi
step gpu_info nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
run_n() { # run_n N CMD...: N ranks under tutti-run, all on GPU 0
  local n=$1; shift
  timeout 240 "$bin/tutti-run" -n "$n" --timeout 120 -- "$@"
}
# result NAME: the value of "RESULT NAME v" in the results file (last one).
result() { awk -v k="$1" '$1 == "RESULT" && $2 == k { v = $3 } END { print v }' "$results"; }

# Kernels vs host reference, bit for bit; mixed host/device buffers on the NULL stream.
step gpu_kernels "$bin/test_gpu_kernels"
# The driver found at run time, host buffers unaffected (the same test as in CI, now with a driver).
step cuda_driver "$bin/test_cuda_driver"
# The stream path's protocol tests (host emulation; they run in CI too).
step stream_protocol "$bin/test_stream_path"
step p2p_protocol "$bin/test_p2p_protocol"
# Every collective x datatype on device buffers, stream order, device scalar, capture, abort.
for n in 1 2 4; do step "device_collectives_${n}ranks" run_n "$n" "$bin/gpu_coll" check; done
for n in 2 4; do step "device_collectives_${n}threads" timeout 240 "$bin/gpu_coll" threads "$n"; done
# Peer figure: device-to-device copy bandwidth, this run.
step d2d_memcpy "$bin/gpu_memcpy_bw" $((256 << 20))
d2d=$(awk '/^d2d_memcpy / { for (i = 1; i <= NF; i++) if ($i ~ /^GB\/s=/) { sub("GB/s=", "", $i); v = $i } } END { print v }' "$results")
# All-reduce on device buffers, 2 ranks on the GPU: busbw at 256 MiB and the 8 B latency,
# through cuda_p2p (CUDA IPC, kernels and the copy engine); the INIT lines say it was on.
step allreduce_device_2ranks env TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=INIT \
  run_n 2 "$bin/gpu_coll" bench
busbw=$(result allreduce_256MiB_busbw_GBps)
lat=$(result allreduce_8B_latency_us)
if grep -q "cuda_p2p: every rank reaches every rank's device" "$results"; then
  log "cuda_p2p: on (device buffers read in place through CUDA IPC)"
else
  log "cuda_p2p: FAIL: not on for 2 ranks on one GPU (see the INIT lines above)"; failed=1
fi
# The same with cuda_p2p off (every byte staged through pinned host memory), for comparison.
step allreduce_device_2ranks_staged env TUTTI_P2P_DISABLE=1 GPU_COLL_TAG=staged \
  run_n 2 "$bin/gpu_coll" bench
# Targets (docs/gpu.md): busbw >= 35% of the copy bandwidth; 8 B latency <= 25 us.
target() { # target NAME OK-EXPRESSION TEXT
  if [ -n "$3" ] && awk "BEGIN { exit !($2) }"; then log "TARGET $1: met ($3)"
  else log "TARGET $1: MISSED ($3)"; failed=1; fi
}
target busbw_vs_memcpy "${busbw:-0} >= 0.35 * ${d2d:-1e9}" \
  "busbw ${busbw:-?} GB/s vs d2d memcpy ${d2d:-?} GB/s: $(awk "BEGIN { if (${d2d:-0} > 0) printf \"%.1f%%\", 100 * ${busbw:-0} / ${d2d} }")"
target latency_8B "${lat:-1e9} <= 25" "8 B all-reduce ${lat:-?} us"
# Host-buffer all-reduce for reference.
step allreduce_host_2ranks "$bin/tutti-run" -n 2 --timeout 120 -- \
  "$bin/all_reduce_perf" -b 8 -e 64M -f 8 -c 1

# One epoch of the MLP on the GPU (tutti-train --device cuda, 2 ranks on GPU 0, gradients
# all-reduced on the device), and the same epoch on the host for comparison: same init, data
# order and update rules, sums in other orders, so the test accuracies differ by little; more
# than 1.5 points after one epoch means the GPU trainer is wrong.
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  step train_cuda_1epoch run_n 2 "$bin/tutti-train" --device cuda --model mlp --epochs 1 --data "$data"
  step train_cpu_1epoch run_n 2 "$bin/tutti-train" --model mlp --epochs 1 --threads 4 --data "$data"
  acc() { grep -E "^epoch +1/1" "$results" | sed -n "$1p" | sed -E 's/.*test +([0-9.]+)%.*/\1/'; }
  gpu_acc=$(acc 1) cpu_acc=$(acc 2)
  target train_accuracy_vs_host "${gpu_acc:-0} - ${cpu_acc:-100} <= 1.5 && ${cpu_acc:-100} - ${gpu_acc:-0} <= 1.5" \
    "test accuracy after 1 epoch: GPU ${gpu_acc:-?}%, host ${cpu_acc:-?}%"
else
  log "NOT RUN train_cuda: no Fashion-MNIST at $data (set FASHION_MNIST_DIR; Debian: dataset-fashion-mnist)"
fi

# nccl-tests built unchanged against tutti's nccl.h and libnccl.so.2, where its sources are.
nt=${NCCL_TESTS_DIR:-$root/../nccl-tests}
if [ -f "$nt/src/all_reduce.cu" ]; then
  mkdir -p "$build/nccl-home" && ln -sfn "$root/include" "$build/nccl-home/include" &&
    ln -sfn "$build/lib" "$build/nccl-home/lib"
  step nccl_tests_build make -C "$nt" -j"$jobs" NCCL_HOME="$build/nccl-home" CUDA_HOME=/usr/local/cuda \
    BUILDDIR="$build/nccl-tests" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" &&
    step nccl_tests_allreduce_2ranks env LD_LIBRARY_PATH="$build/lib" run_n 2 \
      "$build/nccl-tests/all_reduce_perf" -b 8 -e 256M -f 4 -c 1
else
  log "NOT RUN nccl_tests: no nccl-tests sources at $nt (set NCCL_TESTS_DIR)"
fi

# PyTorch's own NCCL backend on tutti's libnccl.so.2, where a CUDA-enabled PyTorch exists.
torch_py=""
for py in python3 /usr/bin/python3 python; do
  if command -v "$py" >/dev/null && "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    torch_py=$(command -v "$py"); break
  fi
done
if [ -n "$torch_py" ]; then
  step torch_nccl_2ranks env LD_PRELOAD="$build/lib/libnccl.so.2" TUTTI_DEBUG=INFO \
    TUTTI_DEBUG_SUBSYS=INIT timeout 300 "$torch_py" "$root/tests/gpu/torch_nccl.py" 2
  # TUTTI_DEBUG=INFO proves which library ran: its log lines start with "TUTTI INFO".
  if grep -q "TUTTI INFO comm .* init done" "$results"; then log "torch_nccl: tutti's library ran (TUTTI INFO lines above)"
  else log "torch_nccl: FAIL: no TUTTI INFO init line: PyTorch did not run on tutti"; failed=1; fi
else
  log "NOT RUN torch_nccl: no PyTorch with CUDA found (python3, /usr/bin/python3, python)"
fi

log "=== summary: $([ $failed = 0 ] && echo 'all steps passed' || echo 'some steps FAILED') (results: $results)"
summary=$(grep -E "^=== .*: (PASS|FAIL)|^TARGET|^NOT RUN|^RESULT" "$results" | sed 's/^/  /')
log "$summary"
exit $failed
