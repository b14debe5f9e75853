#!/usr/bin/env bash
# PyTorch DDP and all_reduce over tutti vs Gloo (perf/torch_bench.py), 2 ranks on this host,
# under the measurement lock. Usage: perf/torch_bench.sh [BUILD_DIR] [torch_bench.py options]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export PYTHONPATH="$build/python" OMP_NUM_THREADS=1
exec flock /tmp/tutti-measure.lock /usr/bin/python3 "$root/tests/torch/launch.py" -n 2 \
  --limit 3000 "$root/perf/torch_bench.py" "$@"
