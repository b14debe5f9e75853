#!/usr/bin/env bash
# ib_compare.sh: tutti's ib transport on two Soft-RoCE devices (rxe0, rxe1: the two ends of a
# veth pair inside the qemu guest of scripts/rxe-vm.sh) against rdma-core's own perftest
# between the same two devices, and tutti's tcp over the guest's loopback, all in one guest
# run, interleaved. Soft-RoCE is a CPU emulation (and the guest a software-emulated CPU), so
# only the ratios mean anything.
#
#   perftest   ib_write_bw --bidir -s 1 MiB, rxe1 -> rxe0 and back at once: bytes per
#              direction per second, from two runs of N1 and N2 iterations (the difference
#              cancels connection setup; perftest's own figures need a cycle counter the
#              emulated CPU does not keep)
#   tutti ib   2 ranks (tutti-run), NCCL_NET=IB, TUTTI_SHM_DISABLE=1, one rank per device:
#              all_reduce_perf fp32 busbw at SIZE (each rank sends and receives SIZE: one
#              direction's bytes per second) and sendrecv_perf busbw (both directions at once),
#              one warm-up and one timed call each (SIZE / out-of-place time: the programs'
#              GB/s columns round these rates to 0.00)
#   tutti tcp  the same two programs with NCCL_NET=Socket over lo
# Targets: all-reduce busbw >= 0.8 x perftest per direction; send/recv >= 0.9 x perftest.
#
#   perf/ib_compare.sh [-B build] [-r reps] [-s size]      (runs the guest; needs root)
# Exit status: 0 targets hold, 1 a target fails, 2 error, 77 no guest possible here.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src_dir=$(cd "$script_dir/.." && pwd)
build="$src_dir/build" reps=3 size=64M inside=0
while getopts "B:r:s:Ih" opt; do
  case $opt in
    B) build=$(cd "$OPTARG" && pwd) ;;
    r) reps=$OPTARG ;;
    s) size=$OPTARG ;;
    I) inside=1 ;;
    *) sed -n 2,19p "$0"; exit 2 ;;
  esac
done
bin="$build/bin"

if [[ $inside == 0 ]]; then
  [[ -x $bin/all_reduce_perf && -x $bin/sendrecv_perf && -x $bin/tutti-run ]] ||
    { echo "no binaries in $bin (-B)" >&2; exit 2; }
  command -v ib_write_bw >/dev/null || { echo "SKIPPED: no ib_write_bw (apt-get install perftest)"; exit 77; }
  # measurements never overlap (HELPERS.md); the guest gets both CPUs
  exec flock /tmp/tutti-measure.lock env RXE_VM_SHARE_RW="$build" RXE_VM_CACHE="$build/rxe-vm" \
    "$src_dir/scripts/rxe-vm.sh" --devices 2 --cpus 2 -- bash "$script_dir/ib_compare.sh" -I -B "$build" -r "$reps" -s "$size"
fi

# ---- inside the guest ----
bytes=$(numfmt --from=iec "$size")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

write_bw_secs() { # seconds the client of ib_write_bw --bidir takes for $1 iterations of 1 MiB
  timeout 300 ib_write_bw -F -d rxe0 -x 1 -s 1048576 -n "$1" --bidir >"$tmp/srv" 2>&1 &
  local srv=$! t0 t1 try
  for try in $(seq 60); do # the server may still be starting (its port listens when it is up)
    ss -ltn 2>/dev/null | grep -q ':18515 ' && break
    sleep 1
  done
  for try in 1 2 3; do
    t0=$(date +%s.%N)
    timeout 300 ib_write_bw -F -d rxe1 -x 1 -s 1048576 -n "$1" --bidir 127.0.0.1 >"$tmp/cli" 2>&1 &&
      break
    t0=""
    sleep 2
  done
  t1=$(date +%s.%N)
  wait $srv || true
  [[ -n $t0 ]] || { echo "ib_write_bw failed:" >&2; cat "$tmp/cli" >&2; return 1; }
  echo "$t1 $t0" | awk '{printf "%.6f\n", $1 - $2}'
}
perftest_mbps() { # MB/s (1e6 bytes) per direction
  local n1=8 n2=40 a b
  a=$(write_bw_secs $n1) && b=$(write_bw_secs $n2) || { echo nan; return 0; }
  echo "$a $b" | awk -v d=$((n2 - n1)) '{printf "%.3f\n", d * 1048576 / ($2 - $1) / 1e6}'
}
tutti_mbps() { # $1 net, $2 program: out-of-place busbw in MB/s (bytes / time in us; n = 2)
  env NCCL_NET="$1" TUTTI_SHM_DISABLE=1 TUTTI_SOCKET_IFNAME=lo timeout 600 "$bin/tutti-run" -n 2 \
    "$bin/$2" -b "$bytes" -e "$bytes" -n 1 -w 1 -c 0 2>>"$tmp/err" |
    awk '!/^#/ && NF >= 8 {printf "%.3f\n", $1 / $6; f = 1; exit} END {if (!f) print "nan"}'
}

for r in $(seq "$reps"); do
  perftest_mbps >>"$tmp/perftest"
  echo "round $r: perftest $(tail -1 "$tmp/perftest")" >&2
  tutti_mbps IB all_reduce_perf >>"$tmp/ib_ar"
  echo "round $r: ib all-reduce $(tail -1 "$tmp/ib_ar")" >&2
  tutti_mbps IB sendrecv_perf >>"$tmp/ib_sr"
  tutti_mbps Socket all_reduce_perf >>"$tmp/tcp_ar"
  tutti_mbps Socket sendrecv_perf >>"$tmp/tcp_sr"
  echo "round $r: perftest $(tail -1 "$tmp/perftest") ib all-reduce $(tail -1 "$tmp/ib_ar")" \
    "ib send/recv $(tail -1 "$tmp/ib_sr") tcp all-reduce $(tail -1 "$tmp/tcp_ar")" \
    "tcp send/recv $(tail -1 "$tmp/tcp_sr") (MB/s)"
done
[[ -s $tmp/err ]] && grep -iE "warn|error" "$tmp/err" | head -5
p=$(median <"$tmp/perftest") ar=$(median <"$tmp/ib_ar") sr=$(median <"$tmp/ib_sr")
tar=$(median <"$tmp/tcp_ar") tsr=$(median <"$tmp/tcp_sr")
echo "medians of $reps rounds, size $size, MB/s per direction:"
echo "  perftest ib_write_bw --bidir rxe1<->rxe0  $p"
echo "  tutti ib all-reduce busbw                 $ar"
echo "  tutti ib send/recv busbw                  $sr"
echo "  tutti tcp (lo) all-reduce busbw           $tar"
echo "  tutti tcp (lo) send/recv busbw            $tsr"
awk -v p="$p" -v ar="$ar" -v sr="$sr" 'BEGIN {
  ok = 1
  r1 = ar / p; r2 = sr / p
  printf "  all-reduce / perftest = %.2f (target >= 0.80) %s\n", r1, r1 >= 0.8 ? "PASS" : "FAIL"
  printf "  send/recv  / perftest = %.2f (target >= 0.90) %s\n", r2, r2 >= 0.9 ? "PASS" : "FAIL"
  exit ((r1 >= 0.8 && r2 >= 0.9) ? 0 : 1)
}'
