#!/usr/bin/env bash
# The prepared GPU check (docs/gpu.md): builds the CUDA variant, then on a GPU machine runs the
# GPU tests and benchmarks and writes every result to one file. Every step has a time limit and
# the whole run a budget (TUTTI_GPU_BUDGET_S, default 540 s including the build), so it ends
# inside one 10-minute command. It fails (exit 1) on any failed step or missed target, and says
# NOT RUN for what the machine lacks (nccl-tests sources, NVIDIA's NCCL, a CUDA PyTorch).
#
#   tests/gpu/run.sh [-o RESULTS_FILE] [--build-only] [--dry-run] [--use-bundle]
#
# --dry-run     on a machine without a GPU (CI, a reviewer): builds, runs the protocol tests
#               through the device emulation, checks every GPU step's program was built and
#               lists the commands it would run; exit 0 when all that passed.
# --use-bundle  build against build-gpu-bundle/ (tests/gpu/bundle.sh) even where the system
#               has the dependencies (the dry run checks the bundle this way).
# A GPU machine whose image lacks hwloc, cJSON, GoogleTest, OpenBLAS or zlib (no network there)
# gets them from build-gpu-bundle/ (TUTTI_GPU_BUNDLE), made here by tests/gpu/bundle.sh and
# sent along with the checkout.
# TUTTI_GPU_STEP_CAP_S caps every step's time limit (a first, diagnostic run on a new machine).
# TUTTI_GPU_BUILD_DIR overrides the build folder (default build-gpu/); TUTTI_GPU_BUILD_LIMIT_S the
# configure and build time limits (default 300 s and 400 s, for 16 cores; a small CI machine needs
# more).
# RESULTS_FILE defaults to $OUT/gpu-results.txt when $OUT is set, else build-gpu/gpu-results.txt.
# Exit status: 0 all passed; 1 a step failed (the file says which); 3 no GPU (built only).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
build=${TUTTI_GPU_BUILD_DIR:-$root/build-gpu}
bundle=${TUTTI_GPU_BUNDLE:-$root/build-gpu-bundle}
results=${OUT:+$OUT/gpu-results.txt}
results=${results:-$build/gpu-results.txt}
build_only=0 dry=0 use_bundle=0
while (($#)); do
  case $1 in
    -o) results=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --dry-run) dry=1; shift ;;
    --use-bundle) use_bundle=1; shift ;;
    *) echo "usage: tests/gpu/run.sh [-o RESULTS_FILE] [--build-only] [--dry-run] [--use-bundle]" >&2
       exit 2 ;;
  esac
done
mkdir -p "$build" "$(dirname "$results")"
: >"$results"
failed=0
deadline=$((SECONDS + ${TUTTI_GPU_BUDGET_S:-540}))
log() { echo "$*" | tee -a "$results"; }
# step NAME LIMIT_S CMD...: runs CMD under a time limit (at most what the budget has left), its
# output into the results file, and records pass/fail. In a dry run, GPU steps (gpu=1) only
# check that their program exists and say what they would run.
gpu=1
skipped=0
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
# hang_report PID: every thread's stack in each program under PID (at most 4; the debugger
# attaches, prints and detaches), so that a step that runs out of time says where it waited.
hang_report() {
  local dbg p n=0 comm
  dbg=$(command -v cuda-gdb || command -v gdb) || { echo "hang report: no debugger" >>"$results"; return 0; }
  for p in $(descendants "$1"); do
    comm=$(cat "/proc/$p/comm" 2>/dev/null)
    case $comm in '' | timeout | bash | sh | env | tutti-run | sleep) continue ;; esac
    ((n++ < 4)) || break
    echo "--- hang report ($(date -u +%T)): pid $p ($comm), every thread's stack:" >>"$results"
    timeout 20 "$dbg" -q -batch -p "$p" -ex "thread apply all bt 16" 2>&1 |
      grep -E '^Thread |^#' >>"$results"
  done
}
step() {
  local name=$1 limit=$2; shift 2
  local left=$((deadline - SECONDS))
  if [[ " ${TUTTI_GPU_SKIP:-} " == *" $name "* ]]; then
    log "=== $name: SKIPPED (TUTTI_GPU_SKIP)"; skipped=$((skipped + 1)); return 0
  fi
  if ((dry && gpu)); then
    local a missing=""
    for a in $(printf '%s\n' "$@" | grep -o "$build/[^ ':]*"); do [ -e "$a" ] || missing+=" $a"; done
    if [ -n "$missing" ]; then log "=== $name: FAIL (dry run: not built:$missing)"; failed=1; return 1; fi
    log "=== $name: DRY-RUN (would run, limit ${limit} s: $*)"
    return 0
  fi
  if ((left < 10)); then log "=== $name: FAIL (NOT RUN: the ${TUTTI_GPU_BUDGET_S:-540} s budget is spent)"
    failed=1; return 1; fi
  ((limit > left)) && limit=$left
  ((limit > ${TUTTI_GPU_STEP_CAP_S:-600})) && limit=${TUTTI_GPU_STEP_CAP_S}
  log "=== $name: $*"
  local t0=$SECONDS wpid=""
  timeout -k 10 "$limit" "$@" >>"$results" 2>&1 &
  local tpid=$!
  # 30 s before the limit, a step still running gets its programs' stacks into the results.
  if ((limit >= 45)); then
    (sleep $((limit - 30)) && kill -0 "$tpid" 2>/dev/null && hang_report "$tpid") &
    wpid=$!
  fi
  wait "$tpid"
  local rc=$?
  [ -n "$wpid" ] && { kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null; }
  local what="FAIL (exit $rc)"
  ((rc == 124 || rc == 137)) && what="FAIL (timed out after $limit s)"
  log "=== $name: $([ $rc = 0 ] && echo PASS || echo "$what") in $((SECONDS - t0)) s"
  [ $rc = 0 ] || failed=1
  return $rc
}

log "tutti GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$( ((dry)) && echo ', DRY RUN (no GPU step runs)')"

# ---- the toolkit, the driver, the build dependencies ----
for d in /usr/local/cuda/bin /usr/local/cuda-13/bin; do [ -x "$d/nvcc" ] && PATH=$d:$PATH; done
export PATH
if ! command -v nvcc >/dev/null; then log "FAIL: no nvcc (looked in PATH and /usr/local/cuda/bin)"; exit 1; fi
log "toolkit: $(command -v nvcc), $(nvcc --version | grep -o 'release [0-9.]*')"
# libcuda.so.1 where the dynamic linker does not know it (a driver mounted under /usr/local/nvidia)
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib64 /usr/lib/x86_64-linux-gnu; do
    if [ -e "$d/libcuda.so.1" ]; then export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; break; fi
  done
fi
drv=$(ldconfig -p 2>/dev/null | grep -o '/[^ ]*libcuda.so.1$' | head -1)
log "driver: ${drv:-no libcuda.so.1 known to ldconfig}${LD_LIBRARY_PATH:+ (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)}"
cmake_extra=()
system_deps_ok() {
  command -v pkg-config >/dev/null && pkg-config --exists hwloc libcjson openblas zlib &&
    { [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ]; }
}
# Unpacks the bundle's packages into $build/deps (no install: dpkg-deb -x, or ar + tar).
use_deps_bundle() {
  local sys=$build/deps lib
  rm -rf "$sys" && mkdir -p "$sys" || return 1
  for deb in "$bundle"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$deb" "$sys" || return 1
    else (cd "$sys" && ar x "$deb" && tar -xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary) ||
      return 1; fi
  done
  lib=$sys/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$sys/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$sys
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local pc; pc=$(command -v pkg-config || echo "$sys/usr/bin/pkgconf")
  cmake_extra=(-DPKG_CONFIG_EXECUTABLE="$pc" -DCMAKE_PREFIX_PATH="$sys/usr" -DZLIB_ROOT="$sys/usr"
    -DCMAKE_LIBRARY_PATH="$lib")
  "$pc" --exists hwloc libcjson openblas zlib || { log "bundle: pkg-config finds not all of hwloc libcjson openblas zlib"; return 1; }
  log "build dependencies: from the bundle $bundle (unpacked into $sys; pkg-config: $pc)"
}
if ((use_bundle)) || ! system_deps_ok; then
  if [ ! -d "$bundle/debs" ]; then
    log "FAIL: the build dependencies (hwloc, cJSON, GoogleTest, OpenBLAS, zlib) are missing and there is no bundle at $bundle: run tests/gpu/bundle.sh on a machine with apt and send build-gpu-bundle along"
    exit 1
  fi
  use_deps_bundle || { log "FAIL: cannot use the bundle at $bundle"; exit 1; }
else
  log "build dependencies: the system's"
fi

# ---- build (only the targets used below) ----
gpu=0
jobs=$(nproc)
generator=() # make where there is one, else ninja (a CUDA image may carry ninja only)
if [ ! -f "$build/CMakeCache.txt" ] && ! command -v make >/dev/null && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
if [ "${TUTTI_GPU_PREBUILT:-0}" = 1 ]; then
  log "build: TUTTI_GPU_PREBUILT=1, the programs in $build/bin and $build/lib as they are"
else
step configure "${TUTTI_GPU_BUILD_LIMIT_S:-300}" cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTUTTI_CUDA=ON \
  -DTUTTI_BUILD_TESTS=ON -DTUTTI_BUILD_PERF=ON -DTUTTI_BUILD_TORCH=OFF "${cmake_extra[@]}" ||
  { log "build failed"; exit 1; }
step build "${TUTTI_GPU_BUILD_LIMIT_S:-400}" cmake --build "$build" -j"$jobs" --target tutti nccl_compat tutti_cuda \
  test_gpu_kernels gpu_memcpy_bw gpu_coll nccl_bench test_cuda_driver test_stream_path \
  test_p2p_protocol test_small_path all_reduce_perf tutti-run tutti-train test_cnn_kernels ||
  { log "build failed"; exit 1; }
fi
bin=$build/bin
if ((build_only)); then log "built only (--build-only)"; exit 0; fi

# ---- the protocol tests: host emulation of the device, no GPU needed (they run in CI too) ----
step stream_protocol 120 "$bin/test_stream_path"
step p2p_protocol 120 "$bin/test_p2p_protocol"
step small_protocol 180 "$bin/test_small_path"
# The driver found at run time, host buffers unaffected (with a GPU: the real driver).
step cuda_driver 60 "$bin/test_cuda_driver"

if ((!dry)) && { ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; }; then
  log "no GPU on this machine (nvidia-smi -L fails): the CUDA variant is built, nothing ran on a GPU"
  exit 3
fi
gpu=1
step gpu_info 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
# run_opts: tutti-run options for the steps after the 1-rank check (see there).
run_opts=""
tutti_run() { echo "$bin/tutti-run" -n "$1" $run_opts --timeout 120 --; }
# result NAME: the value of "RESULT NAME v" in the results file (last one).
result() { awk -v k="$1" '$1 == "RESULT" && $2 == k { v = $3 } END { print v }' "$results"; }

# Kernels vs host reference, bit for bit; mixed host/device buffers on the NULL stream.
step gpu_kernels 120 "$bin/test_gpu_kernels"
# The GPU trainer's CNN kernels (im2col, col2im, pooling + ReLU) vs the host layers, bit for bit.
step cnn_kernels 60 "$bin/test_cnn_kernels"
# Every collective x datatype on device buffers, stream order, device scalar, capture, abort
# (all-reduces up to 64 KiB on 2 and 4 ranks take the small-call path).
# GPU_COLL_VERBOSE: each rank names every call, with the time since its first, before it makes
# it (a slow run shows its pace, a hang where it stopped). When the 2-rank check under
# tutti-run's defaults (a CPU of its own per rank, the shared heap preloaded) fails, the
# variants below tell which default it is (docs/gpu.md, "The first GPU runs"), and the steps
# after it run with the first variant that passed; the default's failure stands.
export GPU_COLL_VERBOSE=1
step device_collectives_1ranks 60 $(tutti_run 1) "$bin/gpu_coll" check
if ! step device_collectives_2ranks 90 $(tutti_run 2) "$bin/gpu_coll" check && ((!dry)); then
  for v in "--heap private" "--bind none" "--bind none --heap private"; do
    failed_before=$failed vname=${v//--/}
    if step "device_collectives_2ranks_${vname// /_}" 45 "$bin/tutti-run" -n 2 $v --timeout 60 -- \
      "$bin/gpu_coll" check; then
      run_opts=$v
      log "the steps below run tutti-run $v"
      break
    fi
    failed=$failed_before # a variant is a diagnosis; the default's failure is already counted
  done
fi
# Diagnosis, not a target: the 2-rank check with each proxy thread kept on its rank's one CPU
# (TUTTI_PROXY_CPUS=inherit, the behaviour before 2026-12-05; docs/gpu.md, "The proxy thread's
# CPUs"). Its verbose lines give the pace per call next to the default's above.
if [ -z "$run_opts" ]; then
  failed_before=$failed
  step device_collectives_2ranks_proxy_inherit 15 env TUTTI_PROXY_CPUS=inherit \
    $(tutti_run 2) "$bin/gpu_coll" check || true
  failed=$failed_before
fi
step device_collectives_4ranks 90 $(tutti_run 4) "$bin/gpu_coll" check
unset GPU_COLL_VERBOSE
for n in 2 4; do step "device_collectives_${n}threads" 120 "$bin/gpu_coll" threads "$n"; done
# Peer figure: device-to-device copy bandwidth, this run.
step d2d_memcpy 60 "$bin/gpu_memcpy_bw" $((256 << 20))
d2d=$(awk '/^d2d_memcpy / { for (i = 1; i <= NF; i++) if ($i ~ /^GB\/s=/) { sub("GB/s=", "", $i); v = $i } } END { print v }' "$results")
# All-reduce on device buffers, 2 ranks on the GPU: busbw at 256 MiB (cuda_p2p: CUDA IPC,
# kernels and the copy engine) and the 8 B latency (the small-call path); the INIT lines say
# both were on.
step allreduce_device_2ranks 120 env TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=INIT \
  $(tutti_run 2) "$bin/gpu_coll" bench
busbw=$(result allreduce_256MiB_busbw_GBps)
lat=$(result allreduce_8B_latency_us)
for want in "cuda_p2p: every rank reaches every rank's device" "small-call path: all-reduces of at most"; do
  if ((dry)); then log "dry run: would check the INIT lines for '$want'"
  elif grep -q "$want" "$results"; then log "on: '$want'"
  else log "FAIL: not on for 2 ranks on one GPU: '$want' (see the INIT lines above)"; failed=1; fi
done
# The 8 B latency inside one CUDA context (2 ranks as threads): without the switches between
# the two processes' contexts that the figure above includes (for the latency budget).
step allreduce_8B_2threads 60 "$bin/gpu_coll" threads-bench 2
# The same with everything staged through pinned host memory (cuda_p2p and the small-call
# path off), for comparison.
step allreduce_device_2ranks_staged 150 env TUTTI_P2P_DISABLE=1 TUTTI_SMALL_BYTES=0 \
  GPU_COLL_TAG=staged $(tutti_run 2) "$bin/gpu_coll" bench
# Targets (docs/gpu.md): busbw >= 35% of the copy bandwidth; 8 B latency <= 25 us.
target() { # target NAME OK-EXPRESSION TEXT
  if ((dry)); then log "TARGET $1: dry run, not measured"; return; fi
  if [ -n "$3" ] && awk "BEGIN { exit !($2) }"; then log "TARGET $1: met ($3)"
  else log "TARGET $1: MISSED ($3)"; failed=1; fi
}
target busbw_vs_memcpy "${busbw:-0} >= 0.35 * ${d2d:-1e9}" \
  "busbw ${busbw:-?} GB/s vs d2d memcpy ${d2d:-?} GB/s: $(awk "BEGIN { if (${d2d:-0} > 0) printf \"%.1f%%\", 100 * ${busbw:-0} / ${d2d:-1} }")"
target latency_8B "${lat:-1e9} <= 25" "8 B all-reduce ${lat:-?} us"
# Host-buffer all-reduce for reference.
step allreduce_host_2ranks 120 $(tutti_run 2) "$bin/all_reduce_perf" -b 8 -e 64M -f 8 -c 1

# ---- PyTorch's own NCCL backend on tutti's libnccl.so.2, where a CUDA PyTorch exists ----
torch_py="" torch_seen=""
for py in python3 /usr/bin/python3 python; do
  command -v "$py" >/dev/null || continue
  v=$("$py" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null) || continue
  torch_seen+=" $(command -v "$py"): torch $v;"
  case $v in *" True") torch_py=$(command -v "$py"); break ;; esac
done
if [ -n "$torch_py" ]; then
  step torch_nccl_2ranks 150 env LD_PRELOAD="$build/lib/libnccl.so.2" TUTTI_DEBUG=INFO \
    TUTTI_DEBUG_SUBSYS=INIT "$torch_py" "$root/tests/gpu/torch_nccl.py" 2
  # TUTTI_DEBUG=INFO proves which library ran: its log lines start with "TUTTI INFO".
  if ((dry)) || grep -q "TUTTI INFO comm .* init done" "$results"; then log "torch_nccl: tutti's library ran (TUTTI INFO lines above)"
  else log "torch_nccl: FAIL: no TUTTI INFO init line: PyTorch did not run on tutti"; failed=1; fi
else
  log "NOT RUN torch_nccl: no PyTorch with CUDA found (python3, /usr/bin/python3, python):${torch_seen:- no torch at all}"
fi

# ---- NVIDIA's NCCL beside tutti: one program (nccl_bench), the library picked by the path ----
nvidia_nccl=${NVIDIA_NCCL_LIB_DIR:-}
if [ -z "$nvidia_nccl" ]; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)"; do
    if [ -n "$d" ] && [ -e "$d/libnccl.so.2" ]; then nvidia_nccl=$d; break; fi
  done
fi
# nccl_bench_run TAG LIBDIR N: N processes on GPU 0 with LIBDIR's libnccl.so.2 first.
nccl_bench_run() {
  local tag=$1 dir=$2 n=$3 idf=$build/nccl-bench-id.$1.$3 pids=() rc=0 r
  rm -f "$idf"
  for ((r = 0; r < n; r++)); do
    LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} NCCL_BENCH_RANK=$r NCCL_BENCH_NRANKS=$n \
      NCCL_BENCH_ID=$idf NCCL_BENCH_TAG=$tag timeout 100 "$bin/nccl_bench" & pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || { local c=$?; ((c > rc)) && rc=$c; }; done
  return $rc
}
export -f nccl_bench_run
export bin build
# tutti at 1 and 2 ranks; $build/bin/nccl_bench named for the dry run's check
for n in 1 2; do step "tutti_nccl_bench_${n}ranks" 120 bash -c "nccl_bench_run tutti '$build/lib' $n # $bin/nccl_bench"; done
if [ -n "$nvidia_nccl" ]; then
  log "NVIDIA's NCCL: $nvidia_nccl/libnccl.so.2"
  step nvidia_nccl_bench_1rank 120 bash -c "nccl_bench_run nvidia '$nvidia_nccl' 1"
  # NVIDIA's NCCL refuses two ranks on one GPU (exit 3, its message above): not a failure.
  if ((!dry)); then
    gpu=1 failed_before=$failed
    step nvidia_nccl_bench_2ranks 120 bash -c "nccl_bench_run nvidia '$nvidia_nccl' 2"
    if tail -5 "$results" | grep -q "ncclCommInitRank refused"; then
      failed=$failed_before; log "nvidia_nccl_bench_2ranks: refused by NVIDIA's NCCL (two ranks on one GPU), as expected"
    fi
  else step nvidia_nccl_bench_2ranks 120 bash -c "nccl_bench_run nvidia '$nvidia_nccl' 2"; fi
else
  log "NOT RUN nvidia_nccl_bench: no NVIDIA libnccl.so.2 (set NVIDIA_NCCL_LIB_DIR; looked in /usr/local/cuda and python3's nvidia.nccl)"
fi

# ---- one epoch of the MLP on the GPU and on the host; two epochs of the CNN on the GPU ----
# tutti-train --device cuda, 2 ranks on GPU 0, gradients all-reduced on the device; the same
# epoch on the host: same init, data order and update rules, sums in other orders, so the test
# accuracies differ by little; more than 1.5 points after one epoch means the GPU trainer is
# wrong.
# The host CNN's test accuracies (%) after epochs 1 and 2 of `tutti-run -n 2 tutti-train --model
# cnn --epochs 2` (seed 1; OpenBLAS Haswell kernels, 1 thread per rank), docs/gpu.md.
CNN_HOST_ACC1=85.98 CNN_HOST_ACC2=88.42
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f "$data/train-images-idx3-ubyte.gz" ] || data=$bundle/fashion-mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  step train_cuda_1epoch 150 $(tutti_run 2) "$bin/tutti-train" --device cuda --model mlp --epochs 1 --data "$data"
  step train_cpu_1epoch 150 $(tutti_run 2) "$bin/tutti-train" --model mlp --epochs 1 --threads 4 --data "$data"
  acc() { grep -E "^epoch +1/1" "$results" | sed -n "$1p" | sed -E 's/.*test +([0-9.]+)%.*/\1/'; }
  gpu_acc=$(acc 1) cpu_acc=$(acc 2)
  target train_accuracy_vs_host "${gpu_acc:-0} - ${cpu_acc:-100} <= 1.5 && ${cpu_acc:-100} - ${gpu_acc:-0} <= 1.5" \
    "test accuracy after 1 epoch: GPU ${gpu_acc:-?}%, host ${cpu_acc:-?}%"
  # The CNN on the GPU (im2col + cuBLAS, pooling and col2im kernels, the same gradient
  # all-reduce), 2 epochs, 2 ranks on GPU 0. No host CNN run here (it would take minutes of this
  # budget): the floors come from the host trainer's run of the same command without --device
  # cuda (2 ranks, seed 1, deterministic; docs/gpu.md: test accuracy after epoch 1 and 2),
  # less the 1.5 points allowed above for the MLP (same model, init, data order and update
  # rules; only the sums run in other orders). And the loss falls: epoch 2's mean training loss
  # below epoch 1's.
  step train_cuda_cnn_2epochs 150 "$bin/tutti-run" -n 2 $run_opts --timeout 140 -- "$bin/tutti-train" --device cuda --model cnn --epochs 2 --data "$data"
  cnn_lines=$(awk '/^=== train_cuda_cnn_2epochs/ { on = 1 } on && /^epoch +[12]\/2/' "$results")
  cnn_field() { echo "$cnn_lines" | sed -n "$1p" | sed -E "$2"; }
  cnn_acc1=$(cnn_field 1 's/.*test +([0-9.]+)%.*/\1/') cnn_acc2=$(cnn_field 2 's/.*test +([0-9.]+)%.*/\1/')
  cnn_loss1=$(cnn_field 1 's/.*\| loss ([0-9.]+) \|.*/\1/') cnn_loss2=$(cnn_field 2 's/.*\| loss ([0-9.]+) \|.*/\1/')
  cnn_rate=$(cnn_field 2 's/.* ([0-9]+) samples\/s.*/\1/')
  ((dry)) || log "RESULT train_cnn_cuda_samples_per_s ${cnn_rate:-?}"
  target train_cnn_accuracy_epoch1 "${cnn_acc1:-0} >= $CNN_HOST_ACC1 - 1.5" \
    "GPU CNN test accuracy after epoch 1 ${cnn_acc1:-?}% vs host $CNN_HOST_ACC1% - 1.5"
  target train_cnn_accuracy_epoch2 "${cnn_acc2:-0} >= $CNN_HOST_ACC2 - 1.5" \
    "GPU CNN test accuracy after epoch 2 ${cnn_acc2:-?}% vs host $CNN_HOST_ACC2% - 1.5"
  target train_cnn_loss_falls "${cnn_loss2:-9} < ${cnn_loss1:-0}" \
    "GPU CNN mean training loss epoch 1 ${cnn_loss1:-?}, epoch 2 ${cnn_loss2:-?}"
else
  log "NOT RUN train_cuda: no Fashion-MNIST (FASHION_MNIST_DIR, /usr/share/datasets/fashion-mnist, $bundle/fashion-mnist)"
fi

# ---- nccl-tests built unchanged against tutti's nccl.h and libnccl.so.2, where its sources are ----
nt=${NCCL_TESTS_DIR:-$root/../nccl-tests}
nt_version=$(sed -n 's/^#define NCCL_TESTS_VERSION "\(.*\)"/\1/p' "$nt/src/common.h" 2>/dev/null)
if [ -f "$nt/src/all_reduce.cu" ] && grep -q 'nccl_device.h' "$nt/src/common.h"; then
  # From 2.17 (NCCL 2.28's release) nccl-tests compiles device-API kernels (ncclDevComm, LSA
  # windows, multimem) from nccl_device.h, which tutti does not provide.
  log "NOT RUN nccl_tests: the sources at $nt (nccl-tests ${nt_version:-?}) need NCCL's device API (nccl_device.h), which tutti does not provide: use nccl-tests v2.16.9 or older"
elif [ -f "$nt/src/all_reduce.cu" ]; then
  log "nccl-tests: $nt, version ${nt_version:-before 2.17 (no NCCL_TESTS_VERSION)}"
  mkdir -p "$build/nccl-home" && ln -sfn "$root/include" "$build/nccl-home/include" &&
    ln -sfn "$build/lib" "$build/nccl-home/lib"
  # Two ranks need nccl-tests' MPI build (without MPI each process is a job of its own) and
  # NCCL_TESTS_DEVICE=0 (both ranks on GPU 0; by default rank r takes GPU r).
  mpi_home="" mpi_inc=""
  command -v mpicc >/dev/null && mpi_inc=$(mpicc --showme:incdirs 2>/dev/null | awk '{ print $1 }')
  [ -n "$mpi_inc" ] && [ -f "$mpi_inc/mpi.h" ] && command -v mpirun >/dev/null && mpi_home=$(dirname "$mpi_inc")
  gpu=0 step nccl_tests_build 200 make -C "$nt" -j"$jobs" ${mpi_home:+MPI=1 MPI_HOME="$mpi_home"} \
    NCCL_HOME="$build/nccl-home" CUDA_HOME=/usr/local/cuda \
    BUILDDIR="$build/nccl-tests" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90"
  if [ -x "$build/nccl-tests/all_reduce_perf" ] || ((dry)); then
    if [ -n "$mpi_home" ]; then
      step nccl_tests_allreduce_2ranks 120 env LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        NCCL_TESTS_DEVICE=0 TUTTI_DEBUG=VERSION mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
        -x LD_LIBRARY_PATH -x NCCL_TESTS_DEVICE -x TUTTI_DEBUG "$build/nccl-tests/all_reduce_perf" -b 8 -e 256M -f 4 -c 1
    else
      log "nccl_tests: no MPI (mpicc, mpi.h, mpirun): nccl-tests runs 1 rank"
      step nccl_tests_allreduce_1rank 120 env LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        TUTTI_DEBUG=VERSION "$build/nccl-tests/all_reduce_perf" -b 8 -e 256M -f 4 -c 1
    fi
  fi
else
  log "NOT RUN nccl_tests: no nccl-tests sources at $nt (set NCCL_TESTS_DIR)"
fi

log "=== summary: $([ $failed = 0 ] && echo 'all steps passed' || echo 'some steps FAILED')$( ((skipped)) && echo ", $skipped skipped (TUTTI_GPU_SKIP)")$( ((dry)) && echo ' (dry run: GPU steps listed, not run)') (results: $results, $SECONDS s)"
summary=$(grep -E "^=== .*: (PASS|FAIL|DRY-RUN|SKIPPED)|^TARGET|^NOT RUN|^RESULT|^FAIL" "$results" | sed 's/^/  /')
log "$summary"
exit $failed
