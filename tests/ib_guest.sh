#!/usr/bin/env bash
# ctest's ib_guest: inside the Soft-RoCE guest (scripts/rxe-vm.sh, rxe0 and rxe1 on a veth pair)
# runs test_ib (collectives at 2 and 3 ranks, send/recv, a killed rank, settings, no leaked verbs
# objects) and the quick collective suite forced onto ib (NCCL_NET=IB, TUTTI_SHM_DISABLE=1: a
# pair that cannot use ib is an error, not a fall back). Exit 77 (skipped, reason printed) where
# no guest can run here.
#   tests/ib_guest.sh BUILD_DIR
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:?usage: ib_guest.sh BUILD_DIR}" && pwd)
if [[ "${2:-}" != --inside ]]; then
  for b in test_ib test_collectives_quick; do
    [[ -x $build/bin/$b ]] || { echo "ib_guest: $build/bin/$b is not built" >&2; exit 1; }
  done
  exec env RXE_VM_SHARE_RW="$build" RXE_VM_CACHE="$build/rxe-vm" \
    "$src/scripts/rxe-vm.sh" --devices 2 -- bash "$src/tests/ib_guest.sh" "$build" --inside
fi
rc=0
"$build/bin/test_ib" || rc=1
NCCL_NET=IB TUTTI_SHM_DISABLE=1 "$build/bin/test_collectives_quick" \
  --gtest_filter='EveryCollective.*:SeveralComms.*' || rc=1
exit $rc
