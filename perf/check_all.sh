#!/usr/bin/env bash
# check_all.sh: every tutti benchmark, every datatype, op and root, checked (-c 1), under each
# launcher; prints one line per (tool, launcher): result rows, rows with a wrong element, exit
# status. The acceptance run of the perf suite:
#
#   perf/check_all.sh [-B build] [-s "sizes"] [launcher ...]
#
# Launchers (default: all three): tutti2 (tutti-run -n 2), tutti3 (tutti-run -n 3),
# mpi4 (mpirun -np 4 --oversubscribe). Sizes default to "-b 8 -e 4M -f 8" and a second sweep
# at counts that do not divide by the number of ranks ("-b 1000 -e 70000 -i 23000").
# hypercube skips (as nccl-tests does) when the number of ranks is not a power of two.
# Exit status 0 when every run exits 0 with no wrong element.
set -uo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$script_dir/../build
sweeps=("-b 8 -e 4M -f 8" "-b 1000 -e 70000 -i 23000")
while getopts "B:s:h" opt; do
  case $opt in
    B) build=$OPTARG ;;
    s) sweeps=("$OPTARG") ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
launchers=("$@")
((${#launchers[@]})) || launchers=(tutti2 tutti3 mpi4)
bin=$build/bin
tools=(all_reduce all_gather broadcast reduce reduce_scatter alltoall gather scatter sendrecv
       hypercube)

launch() {
  case $1 in
    tutti2) echo "$bin/tutti-run -n 2 --timeout 3600" ;;
    tutti3) echo "$bin/tutti-run -n 3 --timeout 3600" ;;
    mpi4) echo "timeout 3600 mpirun --allow-run-as-root -np 4 --oversubscribe" ;;
    *) echo "unknown launcher $1" >&2; exit 2 ;;
  esac
}

status=0
printf "%-16s %-7s %6s %6s %5s %7s  %s\n" tool launcher rows wrong exit seconds note
for l in "${launchers[@]}"; do
  for t in "${tools[@]}"; do
    rows=0 wrong=0 rc=0 note="" t0=$EPOCHREALTIME
    for s in "${sweeps[@]}"; do
      # shellcheck disable=SC2086  # the launcher and the sweep are word lists
      out=$($(launch "$l") "$bin/${t}_perf" $s -d all -o all -r all -n 2 -w 1 -c 1 -T 300 2>&1)
      r=$?
      ((r != 0)) && rc=$r
      rows=$((rows + $(awk '!/^#/ && NF >= 13' <<<"$out" | wc -l)))
      wrong=$((wrong + $(awk '!/^#/ && NF >= 13 && (($9 != "N/A" && $9 > 0) ||
                                                    ($13 != "N/A" && $13 > 0))' <<<"$out" | wc -l)))
      grep -q "skipping" <<<"$out" && note=$(grep -m1 skipping <<<"$out" | sed 's/^# //')
      ((r != 0)) && note=$(tail -n 2 <<<"$out" | tr '\n' ' ')
    done
    secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    printf "%-16s %-7s %6d %6d %5d %7s  %s\n" "${t}_perf" "$l" "$rows" "$wrong" "$rc" "$secs" \
      "$note"
    ((rc != 0 || wrong != 0)) && status=1
  done
done
exit $status
