#!/usr/bin/env bash
# PyTorch DDP and all_reduce over tutti vs Gloo (perf/torch_bench.py), 2 ranks on this host,
# under the measurement lock and SCHED_FIFO priority 10 (chrt; root), so other work on a shared
# machine does not take the CPUs during the run. TUTTI_BENCH_RT= (empty) runs without chrt.
#
# glibc's malloc is told to keep freed memory (heap, not mmap, up to 32 MiB; no trimming): with its
# defaults, whether torch's per-step temporaries of a few MB are page-faulted in again every step
# varies from run to run, and where page faults are dear (virtual machines) that moved a step by
# several times, more than the backends differ (docs/torch.md). Both backends run in the same
# processes with the same settings. TUTTI_BENCH_MALLOC=default keeps glibc's defaults.
# Usage: perf/torch_bench.sh [BUILD_DIR] [torch_bench.py options]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
rt="${TUTTI_BENCH_RT-10}"
rt_cmd=()
[[ -z $rt ]] || rt_cmd=(chrt -f "$rt")
if [[ ${TUTTI_BENCH_MALLOC:-keep} != default ]]; then
  export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
fi
export PYTHONPATH="$build/python" OMP_NUM_THREADS=1
exec flock /tmp/tutti-measure.lock "${rt_cmd[@]}" /usr/bin/python3 "$root/tests/torch/launch.py" \
  -n 2 --limit 3000 "$root/perf/torch_bench.py" "$@"
