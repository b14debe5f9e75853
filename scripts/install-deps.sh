#!/usr/bin/env bash
# Installs every Debian/Ubuntu package tutti's build, tests and benchmarks need.
# Safe to run again; skips apt when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config        # build
  clang-format                            # the format check of .ci/run (scripts/check-format.sh)
  clang libclang-rt-14-dev                # fuzzing: libFuzzer + sanitizers (scripts/fuzz.sh)
  libgtest-dev                            # tests (GoogleTest)
  libhwloc-dev hwloc                      # topology discovery
  libibverbs-dev                          # InfiniBand transport (compiled; runs where there is IB)
  rdma-core ibverbs-utils perftest        # ib: rdma tool, ibv_devinfo, ib_write_bw (perf/ib_compare.sh)
  qemu-system-x86 busybox-static          # ib test bed: the Soft-RoCE guest (scripts/rxe-vm.sh)
  openmpi-bin libopenmpi-dev              # mpirun launches and the Open MPI comparison
  libopenblas-dev zlib1g-dev              # the reference trainer
  dataset-fashion-mnist                   # the trainer's data set
  gnuplot-nox                             # plots
  libcjson-dev                            # JSON output of the perf programs and tutti-sim
  libpmix-dev                             # PMIx bootstrap under mpirun / srun (optional at run time)
  iproute2 iperf3 netcat-openbsd procps   # multi-host test bed in network namespaces
  python3                                 # Debian's /usr/bin/python3 for the comparison scripts
  python3-torch libtorch-dev pybind11-dev # the PyTorch backend (bindings/torch) and its peer Gloo
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
