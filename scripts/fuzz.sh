#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan into build-fuzz/ and runs
# each for a while, starting from its seeds plus the corpus of earlier runs.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 600 s each, every target
#   FUZZ_JOBS=2 scripts/fuzz.sh 600           two targets at a time
#   FUZZ_TIMEOUT=300 scripts/fuzz.sh ...       libFuzzer's per-input limit (wall time; default 60 s)
# Per target: build-fuzz/fuzz-corpus/<t>/ (the corpus), build-fuzz/fuzz-logs/<t>.log (libFuzzer's
# output: executions, coverage), build-fuzz/fuzz-artifacts/<t>-crash-* (an input that failed,
# to replay with build-fuzz/bin/fuzz_<t> FILE). Runs under nice -n 15.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
[ $# -gt 0 ] && shift
all="bootstrap tcp_frames compress settings collcheck topo_xml"
targets=${*:-$all}
dir=build-fuzz
cc=$(command -v clang-14 || command -v clang)
cxx=$(command -v clang++-14 || command -v clang++)
CC=$cc CXX=$cxx cmake -S . -B $dir -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTUTTI_FUZZ=ON \
  -DTUTTI_SANITIZE=address,undefined -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link \
  -DTUTTI_BUILD_PERF=ON -DTUTTI_BUILD_TORCH=OFF -DTUTTI_CUDA=OFF >/dev/null
build_targets=()
for t in $targets; do build_targets+=(fuzz_$t fuzz_${t}_replay); done
nice -n 5 cmake --build $dir -j"${FUZZ_BUILD_JOBS:-2}" --target "${build_targets[@]}"
mkdir -p $dir/fuzz-corpus $dir/fuzz-logs $dir/fuzz-artifacts $dir/fuzz-seeds
# leaks inside libhwloc are hwloc's own (tests/fuzz/lsan.supp says which)
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp}

run_one() {
  local t=$1 secs=$2 dir=$3
  local seeds=$dir/fuzz-seeds/$t corpus=$dir/fuzz-corpus/$t
  mkdir -p "$seeds" "$corpus"
  local t0=$SECONDS
  "$dir/bin/fuzz_${t}_replay" --write-seeds "$seeds"
  local extra=()
  # topo_xml: files that keep hwloc busy are refused by the library's CPU limit on a topology
  # load (TUTTI_TOPO_LOAD_TIMEOUT, default 5 s); 1 s here keeps such an input far from
  # libFuzzer's 60 s per-input timeout, which counts wall time on a shared machine.
  [ "$t" = topo_xml ] && extra=(tests/fixtures tests/fuzz/regress/topo_xml) &&
    export TUTTI_TOPO_LOAD_TIMEOUT=${TUTTI_TOPO_LOAD_TIMEOUT:-1}
  nice -n 15 "$dir/bin/fuzz_$t" "$corpus" "$seeds" "${extra[@]}" -max_total_time="$secs" \
    -timeout="${FUZZ_TIMEOUT:-60}" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/fuzz-artifacts/$t-" >"$dir/fuzz-logs/$t.log" 2>&1
  local rc=$?
  local runs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/fuzz-logs/$t.log" | grep -o '[0-9]*$' || echo '?')
  echo "fuzz $t: exit $rc, $runs inputs in $((SECONDS - t0))s (log $dir/fuzz-logs/$t.log)"
  return $rc
}
export -f run_one
printf '%s\n' $targets | xargs -P "${FUZZ_JOBS:-1}" -I{} bash -c 'run_one "$@"' _ {} "$secs" "$dir"
