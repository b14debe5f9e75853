#!/usr/bin/env bash
# Prepares build-gpu-bundle/ on a Debian machine with apt (this VM, CI): what tests/gpu/run.sh
# needs on a GPU machine whose image has the CUDA toolkit and PyTorch but not tutti's build
# dependencies, and no network to fetch them:
#   build-gpu-bundle/debs/           the Debian packages (apt-get download, no root needed):
#                                    hwloc, cJSON, GoogleTest, OpenBLAS, zlib, pkgconf and
#                                    what they load (libudev, libgfortran)
#   build-gpu-bundle/fashion-mnist/  Fashion-MNIST (Debian's dataset-fashion-mnist), for the
#                                    trainer's epoch
# run.sh unpacks the packages into its build folder (dpkg-deb -x, no install) and builds
# against them when the system lacks them (or with --use-bundle). About 45 MB: send it with
# the checkout (the device tool's `carry`: build-gpu-bundle).
#   tests/gpu/bundle.sh [FOLDER]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-gpu-bundle}
pkgs=(libhwloc15 libhwloc-dev libcjson1 libcjson-dev libgtest-dev libopenblas0
  libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev zlib1g-dev pkgconf-bin
  libpkgconf3 libudev1 libudev-dev libgfortran5)
mkdir -p "$out/debs"
rm -f "$out"/debs/*.deb
(cd "$out/debs" && apt-get download "${pkgs[@]}")
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$out/fashion-mnist" && cp "$data"/*-ubyte.gz "$out/fashion-mnist/"
else
  echo "bundle.sh: no Fashion-MNIST at $data (apt-get install dataset-fashion-mnist): the" \
    "trainer step will say NOT RUN" >&2
fi
du -sh "$out"
