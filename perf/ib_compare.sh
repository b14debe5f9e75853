#!/usr/bin/env bash
# ib_compare.sh: tutti's ib transport on two Soft-RoCE devices (rxe0, rxe1: the two ends of a
# veth pair inside the qemu guest of scripts/rxe-vm.sh) against rdma-core's own perftest
# between the same two devices, and tutti's tcp over the guest's loopback, all in one guest
# run, interleaved. Soft-RoCE is a CPU emulation (and the guest a software-emulated CPU), so
# only the ratios mean anything.
#
#   perftest   ib_write_bw --bidir -n ITERS -s PT_SIZE, rxe1 -> rxe0 and back at once, its own
#              BW average (--report_gbits; both directions summed, halved here), and the same
#              one way. Iteration mode (duration mode -D prints 0 for --bidir on rxe): the rate
#              from the first post to the last completion. PT_SIZE is 1 MiB, not 64 MiB (20
#              writes of 64 MiB would take minutes on Soft-RoCE); rxe cuts every message into
#              MTU packets, so the rate does not depend on it beyond a few hundred KiB. The
#              guest's kernel calibrates its TSC against the HPET, so the cycle counts perftest
#              takes convert to time.
#   tutti ib   2 ranks (tutti-run), NCCL_NET=IB, TUTTI_SHM_DISABLE=1, one rank per device:
#              all_reduce_perf fp32 busbw at SIZE (each rank sends and receives SIZE: one
#              direction's bytes per second) and sendrecv_perf busbw (both directions at once),
#              one warm-up and one timed call each (SIZE / out-of-place time: the programs'
#              GB/s columns round these rates to 0.00), and net_p2p_perf: rank 0 -> rank 1
#              only (SIZE, one warm-up, two timed sends, each timed until its last byte came)
#   tutti tcp  the same two programs with NCCL_NET=Socket over lo
# Targets: all-reduce busbw >= 0.8 x perftest --bidir per direction; send/recv >= 0.9 x
# perftest: one way against one way (net_p2p_perf / ib_write_bw), both ways against both ways
# (sendrecv_perf / ib_write_bw --bidir). Both pairings are printed, with all-reduce and
# sendrecv against one-way ib_write_bw too (the stricter reading).
#
#   perf/ib_compare.sh [-B build] [-r reps] [-s size] [-p pt_size] [-i pt_iters] [-U]  (root)
# Exit status: 0 targets hold, 1 a target fails, 2 error, 77 no guest possible here.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src_dir=$(cd "$script_dir/.." && pwd)
build="$src_dir/build" reps=3 size=64M inside=0 unlocked=0 pt_size=1048576 pt_iters=20
while getopts "B:r:s:p:i:IUh" opt; do
  case $opt in
    B) build=$(cd "$OPTARG" && pwd) ;;
    r) reps=$OPTARG ;;
    s) size=$OPTARG ;;
    p) pt_size=$OPTARG ;;
    i) pt_iters=$OPTARG ;;
    I) inside=1 ;;
    U) unlocked=1 ;;
    *) sed -n 2,24p "$0"; exit 2 ;;
  esac
done
bin="$build/bin"

if [[ $inside == 0 ]]; then
  [[ -x $bin/all_reduce_perf && -x $bin/sendrecv_perf && -x $bin/net_p2p_perf && -x $bin/tutti-run ]] ||
    { echo "no binaries in $bin (-B)" >&2; exit 2; }
  command -v ib_write_bw >/dev/null || { echo "SKIPPED: no ib_write_bw (apt-get install perftest)"; exit 77; }
  # measurements never overlap. The guest runs at low priority like every long job here (never
  # chrt -f: qemu's vCPU threads spin at the same real-time priority as its main loop, which then
  # never runs and the guest stalls; a real-time guest once starved the whole machine), so only
  # ratios within one run count. -U: a trial run without the lock
  run=(flock /tmp/tutti-measure.lock nice -n 15)
  [[ $unlocked == 1 ]] && run=(nice -n 15)
  exec "${run[@]}" env RXE_VM_SHARE_RW="$build" RXE_VM_CACHE="$build/rxe-vm" \
    "$src_dir/scripts/rxe-vm.sh" --devices 2 --cpus 2 -- bash "$script_dir/ib_compare.sh" -I -B "$build" -r "$reps" -s "$size" -p "$pt_size" -i "$pt_iters"
fi

# ---- inside the guest ----
bytes=$(numfmt --from=iec "$size")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { grep -v nan | sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

perftest_gbits() { # ib_write_bw rxe1 -> rxe0 (both ways with --bidir): its BW average, Gb/s
  local -a args=(-F --report_gbits -x 1 -s "$pt_size" -n "$pt_iters" "$@")
  timeout 120 ib_write_bw -d rxe0 "${args[@]}" >"$tmp/srv" 2>&1 &
  local srv=$! try ok=0
  for try in $(seq 60); do # the server listens on 18515 once it is up
    ss -ltn 2>/dev/null | grep -q ':18515 ' && break
    sleep 1
  done
  for try in 1 2 3; do
    timeout 120 ib_write_bw -d rxe1 "${args[@]}" 127.0.0.1 >"$tmp/cli" 2>&1 && { ok=1; break; }
    sleep 2
  done
  wait $srv || true
  [[ $ok == 1 ]] || { echo "ib_write_bw failed:" >&2; cat "$tmp/cli" >&2; echo nan; return 0; }
  # the result line: #bytes #iterations BW-peak BW-average MsgRate
  # (a BW average of 0: perftest's clock failed it; not a figure)
  awk -v s="$pt_size" '$1 == s && NF >= 5 && $4 > 0 {print $4; f = 1} END {if (!f) print "nan"}' "$tmp/cli"
}
perftest_bidir_mbps() { # MB/s (1e6 bytes) per direction: --bidir reports both directions summed
  perftest_gbits --bidir | awk '{printf "%.3f\n", $1 * 1e9 / 8 / 2 / 1e6}'
}
perftest_uni_mbps() {
  perftest_gbits | awk '{printf "%.3f\n", $1 * 1e9 / 8 / 1e6}'
}
tutti_p2p_mbps() { # one way, rank 0 -> rank 1: net_p2p_perf's GB/s (1e9 bytes) in MB/s
  env NCCL_NET=IB TUTTI_SHM_DISABLE=1 timeout 600 "$bin/tutti-run" -n 2 \
    "$bin/net_p2p_perf" "$bytes" 2 1 2>>"$tmp/err" |
    awk '/^p2p/ {printf "%.3f\n", $3 * 1e3; f = 1} END {if (!f) print "nan"}'
}
tutti_mbps() { # $1 net, $2 program: out-of-place busbw in MB/s (bytes / time in us; n = 2)
  env NCCL_NET="$1" TUTTI_SHM_DISABLE=1 TUTTI_SOCKET_IFNAME=lo timeout 600 "$bin/tutti-run" -n 2 \
    "$bin/$2" -b "$bytes" -e "$bytes" -n 1 -w 1 -c 0 2>>"$tmp/err" |
    awk '!/^#/ && NF >= 8 {printf "%.3f\n", $1 / $6; f = 1; exit} END {if (!f) print "nan"}'
}

for r in $(seq "$reps"); do
  for m in "perftest_bidir_mbps perftest" "perftest_uni_mbps perftest_uni" \
    "tutti_mbps IB all_reduce_perf ib_ar" "tutti_mbps IB sendrecv_perf ib_sr" "tutti_p2p_mbps ib_p2p" \
    "tutti_mbps Socket all_reduce_perf tcp_ar" "tutti_mbps Socket sendrecv_perf tcp_sr"; do
    read -r -a w <<<"$m"
    "${w[@]:0:${#w[@]}-1}" >>"$tmp/${w[-1]}"
    echo "  $(date +%T) round $r ${w[-1]}: $(tail -1 "$tmp/${w[-1]}") MB/s" >&2
  done
  echo "round $r (MB/s per direction): ib_write_bw --bidir $(tail -1 "$tmp/perftest")" \
    "(one way $(tail -1 "$tmp/perftest_uni")), ib all-reduce $(tail -1 "$tmp/ib_ar")," \
    "ib send/recv $(tail -1 "$tmp/ib_sr") (one way $(tail -1 "$tmp/ib_p2p")), tcp all-reduce $(tail -1 "$tmp/tcp_ar")," \
    "tcp send/recv $(tail -1 "$tmp/tcp_sr")"
done
[[ -s $tmp/err ]] && grep -iE "warn|error" "$tmp/err" | head -5
p=$(median <"$tmp/perftest") pu=$(median <"$tmp/perftest_uni")
ar=$(median <"$tmp/ib_ar") sr=$(median <"$tmp/ib_sr") p2p=$(median <"$tmp/ib_p2p")
tar=$(median <"$tmp/tcp_ar") tsr=$(median <"$tmp/tcp_sr")
echo "medians of $reps rounds, tutti at $size, perftest $pt_iters x $pt_size bytes," \
  "MB/s (1e6 bytes) per direction:"
echo "  perftest ib_write_bw --bidir rxe1<->rxe0  $p"
echo "  perftest ib_write_bw rxe1->rxe0 (one way) $pu"
echo "  tutti ib all-reduce busbw                 $ar"
echo "  tutti ib send/recv busbw (both ways)     $sr"
echo "  tutti ib send rank 0 -> 1 (one way)       $p2p"
echo "  tutti tcp (lo) all-reduce busbw           $tar"
echo "  tutti tcp (lo) send/recv busbw            $tsr"
# (parentheses: a bare ">" among printf's arguments would be an output redirection)
awk -v p="$p" -v pu="$pu" -v ar="$ar" -v sr="$sr" -v p2p="$p2p" 'BEGIN {
  r1 = ar / p; r2 = p2p / pu; r3 = sr / p
  printf "  all-reduce / perftest --bidir         = %.2f (target >= 0.80) %s\n", r1, (r1 >= 0.8 ? "PASS" : "FAIL")
  printf "  send one way / perftest one way       = %.2f (target >= 0.90) %s\n", r2, (r2 >= 0.9 ? "PASS" : "FAIL")
  printf "  send/recv both ways / perftest --bidir = %.2f (target >= 0.90) %s\n", r3, (r3 >= 0.9 ? "PASS" : "FAIL")
  printf "  (against one way: all-reduce %.2f, send/recv both ways %.2f)\n", ar / pu, sr / pu
  exit ((r1 >= 0.8 && r2 >= 0.9 && r3 >= 0.9) ? 0 : 1)
}'
