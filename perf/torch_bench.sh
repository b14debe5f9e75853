#!/usr/bin/env bash
# PyTorch DDP and all_reduce over tutti vs Gloo (perf/torch_bench.py), 2 ranks on this host,
# under the measurement lock and SCHED_FIFO priority 10 (chrt; root), so other work on a shared
# machine does not take the CPUs during the run. TUTTI_BENCH_RT= (empty) runs without chrt.
# Usage: perf/torch_bench.sh [BUILD_DIR] [torch_bench.py options]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
rt="${TUTTI_BENCH_RT-10}"
rt_cmd=()
[[ -z $rt ]] || rt_cmd=(chrt -f "$rt")
export PYTHONPATH="$build/python" OMP_NUM_THREADS=1
exec flock /tmp/tutti-measure.lock "${rt_cmd[@]}" /usr/bin/python3 "$root/tests/torch/launch.py" \
  -n 2 --limit 3000 "$root/perf/torch_bench.py" "$@"
