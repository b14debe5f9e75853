#!/usr/bin/env bash
# The prepared GPU check (docs/gpu.md): builds the CUDA variant, then on a GPU machine runs the
# GPU tests and benchmarks and writes every result to one file. Under 6 minutes with the build
# on a 16-core machine (only the targets below are built).
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
  test_gpu_kernels gpu_memcpy_bw test_cuda_driver all_reduce_perf tutti-run ||
  { log "build failed"; exit 1; }
bin=$build/bin
if ((build_only)); then log "built only (--build-only)"; exit 0; fi

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  log "no GPU on this machine (nvidia-smi -L fails): the CUDA variant is built, nothing ran on a GPU"
  exit 3
fi
step gpu_info nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv

# Kernels vs host reference, bit for bit; device pointers refused by name.
step gpu_kernels "$bin/test_gpu_kernels"
# The driver found at run time, host buffers unaffected (the same test as in CI, now with a driver).
step cuda_driver "$bin/test_cuda_driver"
# Peer figure for GPU collectives: device-to-device copy bandwidth, this run.
step d2d_memcpy "$bin/gpu_memcpy_bw" $((256 << 20))
# Host-buffer all-reduce for reference (device buffers are not accepted by this build yet).
step allreduce_host_2ranks "$bin/tutti-run" -n 2 --timeout 120 -- \
  "$bin/all_reduce_perf" -b 8 -e 256M -f 4 -c 1

log "=== summary: $([ $failed = 0 ] && echo 'all steps passed' || echo 'some steps FAILED') (results: $results)"
exit $failed
