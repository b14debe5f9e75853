#!/usr/bin/env bash
# ib_compare.sh: tutti's ib transport on two Soft-RoCE devices (rxe0, rxe1: the two ends of a
# veth pair inside the qemu guest of scripts/rxe-vm.sh) against rdma-core's own perftest
# between the same two devices, and tutti's tcp over the guest's loopback, all in one guest
# run, rounds interleaved (each round runs every program once, perftest and tutti in turn).
# Soft-RoCE is a CPU emulation (and the guest a software-emulated CPU), so only the ratios mean
# anything; the per-round ratios pair figures taken minutes apart, the medians over rounds and
# their spread (min-max) show how far one round can be trusted.
#
#   perftest   ib_write_bw -n ITERS -s PT_SIZE, rxe1 -> rxe0 one way, and with --bidir both
#              ways at once, each run on its own port with a fresh server. A run that fails
#              (no connection, a timeout) or prints a BW average of 0 (perftest's clock failed
#              it) is run again, up to TRIES times; the retries are counted and reported.
#              Per direction with --bidir: perftest sums the two directions. Each side measures
#              its own writes (its bytes / the time from its first post to its last
#              completion); the client then exchanges reports with the server and prints the
#              sum (perftest's src/write_bw.c: xchg_bw_reports, then print_full_bw_report with
#              the remote report, which "will sum the server and client results" as
#              src/perftest_resources.h says). So the per-direction figure here is that sum / 2
#              (the mean of the two directions). Iteration mode (duration mode -D prints 0
#              for --bidir on rxe). -u 18: the ack timeout tutti's QPs use (TUTTI_IB_TIMEOUT,
#              4.096 us x 2^18 = 1.07 s), where perftest's default (14: 67 ms) has rxe
#              retransmitting whenever the loaded, emulated guest acks late. PT_SIZE is 1 MiB, not 64 MiB (20 writes of 64 MiB
#              take minutes on Soft-RoCE); rxe cuts every message into MTU packets, so the rate
#              does not depend on it beyond a few hundred KiB. The guest's kernel calibrates
#              its TSC against the HPET, so the cycle counts perftest takes convert to time.
#   tutti ib   2 ranks (tutti-run), NCCL_NET=IB, TUTTI_SHM_DISABLE=1, one rank per device:
#              all_reduce_perf fp32 busbw at SIZE (each rank sends and receives SIZE: one
#              direction's bytes per second) and sendrecv_perf busbw (both directions at once),
#              one warm-up and one timed call each (SIZE / out-of-place time: the programs'
#              GB/s columns round these rates to 0.00), and net_p2p_perf: rank 0 -> rank 1
#              only (SIZE, one warm-up, two timed sends, each timed until its last byte came),
#              from malloc buffers (each large send registers both ends' buffers for the call)
#              and with -M from ncclMemAlloc buffers (registered once and cached, as perftest
#              registers its buffer before timing; printed beside the verdict, not in it)
#   tutti tcp  the same two programs with NCCL_NET=Socket over lo
# Targets: all-reduce busbw >= 0.8 x perftest --bidir per direction; send/recv >= 0.9 x
# perftest: one way against one way (net_p2p_perf / ib_write_bw), both ways against both ways
# (sendrecv_perf / ib_write_bw --bidir per direction). All-reduce and send/recv against one-way
# ib_write_bw are printed too (the stricter reading). Verdicts use the ratios of the medians.
#
#   perf/ib_compare.sh [-B build] [-r rounds] [-s size] [-p pt_size] [-i pt_iters] [-t tries] [-U]
# The guest runs under nice -n 15 and, unless -U, holds /tmp/tutti-measure.lock (never chrt:
# qemu's vCPU threads at real-time priority starve its own main loop and the machine).
# Exit status: 0 targets hold, 1 a target fails, 2 error, 77 no guest possible here.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src_dir=$(cd "$script_dir/.." && pwd)
build="$src_dir/build" reps=5 size=64M inside=0 unlocked=0 pt_size=1048576 pt_iters=20 tries=4
while getopts "B:r:s:p:i:t:IUh" opt; do
  case $opt in
    B) build=$(cd "$OPTARG" && pwd) ;;
    r) reps=$OPTARG ;;
    s) size=$OPTARG ;;
    p) pt_size=$OPTARG ;;
    i) pt_iters=$OPTARG ;;
    t) tries=$OPTARG ;;
    I) inside=1 ;;
    U) unlocked=1 ;;
    *) sed -n 2,41p "$0"; exit 2 ;;
  esac
done
bin="$build/bin"

if [[ $inside == 0 ]]; then
  [[ -x $bin/all_reduce_perf && -x $bin/sendrecv_perf && -x $bin/net_p2p_perf && -x $bin/tutti-run ]] ||
    { echo "no binaries in $bin (-B)" >&2; exit 2; }
  command -v ib_write_bw >/dev/null || { echo "SKIPPED: no ib_write_bw (apt-get install perftest)"; exit 77; }
  run=(flock /tmp/tutti-measure.lock nice -n 15)
  [[ $unlocked == 1 ]] && run=(nice -n 15)
  exec "${run[@]}" env RXE_VM_SHARE_RW="$build" RXE_VM_CACHE="$build/rxe-vm" \
    RXE_VM_TIMEOUT="${RXE_VM_TIMEOUT:-5400}" "$src_dir/scripts/rxe-vm.sh" --devices 2 --cpus 2 -- \
    bash "$script_dir/ib_compare.sh" -I -B "$build" -r "$reps" -s "$size" -p "$pt_size" \
    -i "$pt_iters" -t "$tries"
fi

# ---- inside the guest ----
bytes=$(numfmt --from=iec "$size")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=18515
log="$build/ib_compare-perftest.log"
: >"$log"

# stdin: numbers (nan lines ignored); prints "median min max", or "nan nan nan"
stats() {
  grep -v nan | sort -g | awk '{v[NR] = $1} END {
    if (NR == 0) { print "nan nan nan"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }'
}

# One ib_write_bw run, rxe1 (client) -> rxe0 (server), on a port of its own so that a server
# left over from a failed try cannot take the client. Prints the BW averages (Gb/s) of the
# result line (#bytes #iterations BW-peak BW-average MsgRate); --bidir: the sum of both
# directions. Fails on no result or 0.
perftest_once() {
  port=$((port + 1))
  local -a args=(-F --report_gbits -x 1 -u 18 -p "$port" -s "$pt_size" -n "$pt_iters" "$@")
  timeout 300 ib_write_bw -d rxe0 "${args[@]}" >"$tmp/srv" 2>&1 &
  local srv=$! try rc=0
  for try in $(seq 120); do # the server listens once its device is open
    ss -ltn 2>/dev/null | grep -q ":$port " && break
    sleep 0.5
  done
  timeout 300 ib_write_bw -d rxe1 "${args[@]}" 127.0.0.1 >"$tmp/cli" 2>&1 || rc=$?
  [[ $rc == 0 ]] || kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  if [[ $rc != 0 ]]; then # the whole output of both ends goes to the log (build folder)
    echo "ib_write_bw $* exited $rc (client and server output in $log)" >&2
    { echo "==== $(date +%T) ib_write_bw $* exited $rc; client:"; cat "$tmp/cli"
      echo "==== server:"; cat "$tmp/srv"; } >>"$log"
    return 1
  fi
  awk -v s="$pt_size" '$1 == s && NF >= 5 {if ($4 <= 0) bad = 1; printf "%s ", $4; n++}
    END {print ""; exit (n == 0 || bad)}' "$tmp/cli" >"$tmp/pt" ||
    { echo "ib_write_bw $* gave no figure or 0: $(grep -E "^ *$pt_size " "$tmp/cli" | tr -s ' ')" >&2; return 1; }
  cat "$tmp/pt"
}
# $1: retry counter's name; the rest: ib_write_bw's arguments. Prints perftest_once's figures
# (Gb/s), or nan after TRIES failed tries.
perftest_retry() {
  local name=$1 try out
  shift
  for try in $(seq "$tries"); do
    if out=$(perftest_once "$@"); then
      echo "$out"
      return 0
    fi
    echo 1 >>"$tmp/retries_$name"
    sleep 2
  done
  echo nan
}
gbits_to_mbps() { awk -v g="$1" -v d="$2" 'BEGIN {if (g == "nan" || g == "") print "nan"; else printf "%.3f\n", g * 1e9 / 8 / d / 1e6}'; }
perftest_bidir_mbps() { # MB/s (1e6 bytes) per direction: the sum / 2
  local -a f
  read -r -a f <<<"$(perftest_retry bidir --bidir)"
  gbits_to_mbps "${f[0]}" 2
}
perftest_uni_mbps() {
  local -a f
  read -r -a f <<<"$(perftest_retry uni)"
  gbits_to_mbps "${f[0]}" 1
}
tutti_p2p_mbps() { # one way, rank 0 -> rank 1: net_p2p_perf's GB/s (1e9 bytes) in MB/s; $1: -M
  env NCCL_NET=IB TUTTI_SHM_DISABLE=1 timeout 900 "$bin/tutti-run" -n 2 \
    "$bin/net_p2p_perf" "$@" "$bytes" 2 1 2>>"$tmp/err" |
    awk '/^p2p/ {printf "%.3f\n", $3 * 1e3; f = 1} END {if (!f) print "nan"}'
}
tutti_mbps() { # $1 net, $2 program: out-of-place busbw in MB/s (bytes / time in us; n = 2)
  env NCCL_NET="$1" TUTTI_SHM_DISABLE=1 TUTTI_SOCKET_IFNAME=lo timeout 900 "$bin/tutti-run" -n 2 \
    "$bin/$2" -b "$bytes" -e "$bytes" -n 1 -w 1 -c 0 2>>"$tmp/err" |
    awk '!/^#/ && NF >= 8 {printf "%.3f\n", $1 / $6; f = 1; exit} END {if (!f) print "nan"}'
}

cols="perftest perftest_uni ib_ar ib_sr ib_p2p ib_p2p_m tcp_ar tcp_sr"
for r in $(seq "$reps"); do
  for m in "perftest_bidir_mbps perftest" "tutti_mbps IB all_reduce_perf ib_ar" \
    "perftest_uni_mbps perftest_uni" "tutti_mbps IB sendrecv_perf ib_sr" "tutti_p2p_mbps ib_p2p" "tutti_p2p_mbps -M ib_p2p_m" \
    "tutti_mbps Socket all_reduce_perf tcp_ar" "tutti_mbps Socket sendrecv_perf tcp_sr"; do
    read -r -a w <<<"$m"
    "${w[@]:0:${#w[@]}-1}" >>"$tmp/${w[-1]}"
    echo "  $(date +%T) round $r ${w[-1]}: $(tail -1 "$tmp/${w[-1]}") MB/s" >&2
  done
  # the ratios of this round (no process substitution: the guest has no /dev/fd)
  for c in ib_ar ib_sr ib_p2p perftest perftest_uni; do tail -1 "$tmp/$c"; done | paste -sd ' ' |
    awk 'function q(a, b) { return (a == "nan" || b == "nan" || b + 0 <= 0) ? "nan" : a / b }
      {print q($1, $4), q($3, $5), q($2, $4), q($1, $5), q($2, $5)}' \
    >>"$tmp/ratios"
done
[[ -s $tmp/err ]] && grep -iE "warn|error" "$tmp/err" | head -5

echo "rounds: MB/s (1e6 bytes) per direction; tutti at $size, perftest $pt_iters x $pt_size bytes"
echo "| round | ib_write_bw --bidir | ib_write_bw one way | tutti ib all-reduce" \
  "| tutti ib send/recv both ways | tutti ib send one way | tutti ib send one way, -M" \
  "| tutti tcp all-reduce | tutti tcp send/recv |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
paste -d ' ' "$tmp"/{perftest,perftest_uni,ib_ar,ib_sr,ib_p2p,ib_p2p_m,tcp_ar,tcp_sr} |
  awk '{printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", NR, $1, $2, $3, $4, $5, $6, $7, $8}'
declare -A med lo hi
for c in $cols; do
  read -r "med[$c]" "lo[$c]" "hi[$c]" <<<"$(stats <"$tmp/$c")"
done
echo "| median (min-max) |$(for c in $cols; do printf ' %s (%s-%s) |' "${med[$c]}" "${lo[$c]}" "${hi[$c]}"; done)"
echo "perftest retries (failed or 0 runs, run again): --bidir $(cat "$tmp/retries_bidir" 2>/dev/null | wc -l)," \
  "one way $(cat "$tmp/retries_uni" 2>/dev/null | wc -l); rounds without a figure: --bidir" \
  "$(grep -c nan "$tmp/perftest" || true), one way $(grep -c nan "$tmp/perftest_uni" || true)"
echo "per-round ratios, median (min-max):"
i=0
for name in "all-reduce / --bidir" "send one way / one way" "send/recv / --bidir" \
  "all-reduce / one way" "send/recv / one way"; do
  i=$((i + 1))
  echo "  $name: $(cut -d ' ' -f $i "$tmp/ratios" | stats | awk '{printf "%.2f (%.2f-%.2f)", $1, $2, $3}')"
done
# (parentheses: a bare ">" among printf's arguments would be an output redirection)
echo "ratios of the medians:"
awk -v p="${med[perftest]}" -v pu="${med[perftest_uni]}" -v ar="${med[ib_ar]}" -v sr="${med[ib_sr]}" \
  -v p2p="${med[ib_p2p]}" -v p2pm="${med[ib_p2p_m]}" 'BEGIN {
  if (p == "nan" || pu == "nan" || ar == "nan" || sr == "nan" || p2p == "nan") {
    print "  a median is missing: no verdict"; exit 2 }
  r1 = ar / p; r2 = p2p / pu; r3 = sr / p
  printf "  all-reduce / perftest --bidir          = %.2f (target >= 0.80) %s\n", r1, (r1 >= 0.8 ? "PASS" : "FAIL")
  printf "  send one way / perftest one way        = %.2f (target >= 0.90) %s\n", r2, (r2 >= 0.9 ? "PASS" : "FAIL")
  printf "  send/recv both ways / perftest --bidir = %.2f (target >= 0.90) %s\n", r3, (r3 >= 0.9 ? "PASS" : "FAIL")
  printf "  (against one way: all-reduce %.2f, send/recv both ways %.2f)\n", ar / pu, sr / pu
  if (p2pm != "nan") printf "  (send one way from ncclMemAlloc buffers / perftest one way = %.2f)\n", p2pm / pu
  exit ((r1 >= 0.8 && r2 >= 0.9 && r3 >= 0.9) ? 0 : 1)
}'
