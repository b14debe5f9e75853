#!/usr/bin/env bash
# Sanitizer runs of the test suite, each in its own build directory.
#   scripts/sanitize.sh asan  [--ci | ctest args]   ASan + UBSan (build-asan/)
#   scripts/sanitize.sh tsan  [--ci | ctest args]   TSan (build-tsan/)
# Without ctest args it runs the tests labelled "quick";
# e.g. `scripts/sanitize.sh tsan -R EndRace` runs one group, `scripts/sanitize.sh asan -L slow`
# the slow ones. A sanitizer report makes the test fail (halt_on_error, exitcode).
# On a shared machine run it as `nice -n 19 scripts/sanitize.sh ...`. The whole suite is not
# part of .ci/run (the two full builds alone take longer than CI's budget on a 2-CPU machine;
# `--ci` below is); docs/hardening.md has the figures of the last full runs.
#
# The build has every target of the tree (every program a quick test runs: tutti-sim, the fuzz
# replays, nccl_compat_app, test_ib, ...), with two parts left out:
#  - the CUDA variant (-DTUTTI_CUDA=OFF): nvcc does not take -fsanitize, and without a GPU its
#    kernels would not run; the host side of the GPU path (src/device*.c, src/cuda_driver.c) is
#    in libtutti either way and is tested here;
#  - the PyTorch backend (-DTUTTI_BUILD_TORCH=OFF): it is a module loaded into Debian's python3
#    and libtorch, neither built with a sanitizer: ASan's runtime must be the first library of
#    the process (python3 would need LD_PRELOAD=libasan.so), TSan's cannot be loaded by dlopen
#    at all, and TSan cannot see the synchronisation inside an uninstrumented libtorch.
# SANITIZE_TARGETS="test_hardening tutti-run ..." builds only those targets (the tests of the
# programs not built then fail as "not run": select the others with -R).
#
# `scripts/sanitize.sh asan|tsan --ci` is the reduced set .ci/run runs (the whole suite under
# both takes about an hour each on 2 CPUs: docs/hardening.md): only the programs of the
# hardening tests (every defect of issue 13 with its test: groups, end races, secrets, small
# /dev/shm, agreed settings, collective checks, the launcher), the peer-lifetime tests, the
# peer path's rooted collectives and all-to-all (test_direct_rooted), the shm transport's large
# steps by rendezvous (test_shm_rdv: a receiver reading its sender's buffer), the quick way's tests
# (the path a repeated small call takes, an abort from another thread included), under ASan
# the replays of the fuzz corpora (every parser of untrusted bytes), under TSan ib_no_device (a
# fork after another thread logged), and those tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan|tsan [--ci | ctest args]}
shift
ci=0
if [ "${1:-}" = --ci ]; then
  ci=1
  shift
  SANITIZE_TARGETS="test_hardening test_peer_lifetime test_quick test_direct_rooted test_shm_rdv"
  SANITIZE_TARGETS+=" test_quick_lanes test_call_cache test_p2p_in_place test_alltoall_swap"
  SANITIZE_TARGETS+=" tutti-run"
  SANITIZE_TARGETS+=" env_allreduce"
  ci_tests='^(Group|GroupSplit|GroupInit|SmallDevShm|Secret|LaunchEnv|AgreedSettings|CheckColl'
  ci_tests+='|CheckCollMatching|EndRace|Register|PeerLifetime|DirectRooted|ShmLarge|Quick'
  ci_tests+='|QuickLanes|GatherOrExchange/QuickLanesFailure|CallCache|Ranks/P2pInPlace'
  ci_tests+='|P2pInPlaceInPart|AlltoAllSwap)\.'
  ci_tests+='|^Launcher\.RanksDieWhenTuttiRunIsKilled$'
  if [ "$kind" = asan ]; then
    for t in bootstrap tcp_frames compress settings collcheck topo_xml; do
      SANITIZE_TARGETS+=" fuzz_${t}_replay"
    done
    ci_tests+='|^fuzz_replay_'
  else
    # A fork after another thread logged and ended: the logger's and the settings' fork
    # handlers must order the child's use of their locks after that thread's.
    SANITIZE_TARGETS+=" test_ib"
    ci_tests+='|^ib_no_device$'
  fi
fi
case "$kind" in
  asan) flags=address,undefined ;;
  tsan) flags=thread ;;
  *) echo "unknown sanitizer '$kind' (asan or tsan)" >&2; exit 2 ;;
esac
dir=build-$kind
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTUTTI_SANITIZE=$flags \
  -DTUTTI_CUDA=OFF -DTUTTI_BUILD_TORCH=OFF >/dev/null
targets=()
for t in ${SANITIZE_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j"${SANITIZE_JOBS:-$(nproc)}" "${targets[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitize/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:die_after_fork=0}
# The harness's per-run limits (tests/harness.h, 40-300 s) are set for plain builds; ranks run
# 2-3 times slower under ASan and 5-15 times under TSan, more on a shared machine.
# --ci doubles the margin: a CI machine may be slower than the one the limits were set on.
if [ "$kind" = tsan ]; then scale=4; else scale=2; fi
[ "$ci" = 1 ] && scale=$((scale * 2))
# OpenBLAS (the trainer's GEMMs) is not instrumented: its worker threads hand work over through
# flags TSan cannot see, and every trainer test that runs a GEMM on two threads reported races
# between OpenBLAS's workers and the caller's buffers. Under TSan it runs on the calling thread.
[ "$kind" = tsan ] && export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export TUTTI_TEST_TIMEOUT_SCALE=${TUTTI_TEST_TIMEOUT_SCALE:-$scale}
cd "$dir"
# Both kinds run the whole quick label. TSan cannot follow a process that forks while it has
# threads and then starts threads in the child; the tests fork their ranks while the test
# process has one thread (tests/harness.cc run_procs, tests/forked_ranks.h), and the groups once
# left out for it here (*/Procs, EnvLaunch, Launcher, SmallDevShm, Secret, LaunchEnv) pass
# under TSan, so none is left out. die_after_fork=0 stays: the library forks from a process
# that has threads (the trial load of a topology file at init), a child that starts no thread;
# TSan's default kills such a child.
if [ "$ci" = 1 ]; then
  set -- -R "$ci_tests" "$@"
elif [ $# -eq 0 ]; then
  set -- -L quick
fi
ctest --output-on-failure --timeout 1200 "$@"
