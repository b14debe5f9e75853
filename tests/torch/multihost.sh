#!/usr/bin/env bash
# 2 hosts x 2 ranks on the namespace test bed (scripts/netns-cluster.sh, needs root): runs
# tests/torch/test_ops.py (or the script given) as ranks 0,1 on h1 and 2,3 on h2, rendezvous
# through MASTER_ADDR=h1's address. Fails unless all four ranks exit 0.
#   tests/torch/multihost.sh BUILD_DIR [script.py]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:?usage: multihost.sh BUILD_DIR [script]}" && pwd)"
script="${2:-$root/tests/torch/test_ops.py}"
export TUTTI_NETNS_PREFIX="torch17-$$-"
bed="$root/scripts/netns-cluster.sh"
trap 'bash "$bed" down >/dev/null 2>&1 || true' EXIT
bash "$bed" up 2 >/dev/null
master="$(bash "$bed" addr h1)"
pids=()
for rank in 0 1 2 3; do
  host="h$((rank / 2 + 1))"
  bash "$bed" exec "$host" env RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$((rank % 2)) \
    MASTER_ADDR="$master" MASTER_PORT=29517 NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
    PYTHONPATH="$build/python" timeout 500 /usr/bin/python3 "$script" &
  pids+=($!)
done
fail=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "multihost: rank $i failed"
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "multihost: 2 hosts x 2 ranks passed"
exit $fail
