#!/usr/bin/env bash
# Sanitizer runs of the test suite, each in its own build directory.
#   scripts/sanitize.sh asan  [ctest args]   ASan + UBSan (build-asan/)
#   scripts/sanitize.sh tsan  [ctest args]   TSan (build-tsan/)
# Without ctest args it runs the tests labelled "quick"; e.g. `scripts/sanitize.sh tsan -R EndRace`
# runs one group, `scripts/sanitize.sh asan -L slow` the slow ones. A sanitizer report makes the
# test fail (halt_on_error, exitcode).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan|tsan [ctest args]}
shift
case "$kind" in
  asan) flags=address,undefined ;;
  tsan) flags=thread ;;
  *) echo "unknown sanitizer '$kind' (asan or tsan)" >&2; exit 2 ;;
esac
dir=build-$kind
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTUTTI_SANITIZE=$flags >/dev/null
cmake --build "$dir" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:die_after_fork=0}
cd "$dir"
# TSan does not support a process that forks while it has threads and then starts threads in
# the child ("dup thread with used id"): the tests whose ranks are forked processes (names
# ending in /Procs, and the launcher tests) run under ASan only.
if [ $# -eq 0 ]; then
  if [ "$kind" = tsan ]; then set -- -L quick -E "Procs|EnvLaunch|Launcher|SmallDevShm|Secret|LaunchEnv"
  else set -- -L quick; fi
fi
ctest --output-on-failure --timeout 1200 "$@"
