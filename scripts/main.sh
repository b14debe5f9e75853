#!/usr/bin/env bash
# The main job: installs dependencies, builds, runs a local 2-rank all-reduce benchmark
# (every size from 8 B to 64 MiB, checked; then from 16 KiB with ncclMemAlloc buffers, the
# zero-copy path) and, when the trainer is built, a short
# data-parallel training run on Fashion-MNIST.
#   NRANKS=4 scripts/main.sh   to use more ranks
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
N=${NRANKS:-2}
echo "== all-reduce benchmark: $N ranks over shared memory"
build/bin/tutti-run -n "$N" build/bin/all_reduce_perf -b 8 -e 64M -f 2 -c 1
echo "== the same from 16 KiB with ncclMemAlloc buffers (-R 1): peers read and write them in place"
build/bin/tutti-run -n "$N" build/bin/all_reduce_perf -b 16K -e 64M -f 2 -c 1 -R 1
if [ -x build/bin/tutti-train ]; then
  echo "== data-parallel training: $N ranks, MLP, 1 epoch"
  build/bin/tutti-run -n "$N" build/bin/tutti-train --model mlp --epochs 1
fi
