#!/usr/bin/env bash
# net_compare.sh: tutti's TCP transport across two namespace hosts (scripts/netns-cluster.sh,
# one veth link through a bridge), against iperf3 and PyTorch's Gloo on the same pair, all in
# the same run, interleaved (the machines are shared and noisy: only side-by-side ratios mean
# anything). Needs root.
#
#   1. unlimited link: fp32 all-reduce busbw at SIZE (all_reduce_perf, 2 hosts x 1 rank),
#      iperf3 single stream h1 -> h2, iperf3 --bidir (per direction: what an all-reduce needs,
#      each rank sends and receives SIZE), Gloo's all-reduce, tutti's one-way send/recv.
#   2. the link limited to RATE (tc tbf, both ends): all-reduce busbw against the line rate
#      (and iperf3 on the same limited link).
# Prints medians, ratios and the targets:
#   busbw >= 0.8 x iperf3 single stream;  busbw >= 1.5 x Gloo;  busbw(RATE) >= 0.9 x RATE
# Exit status: 0 every target holds, 1 some target fails, 2 error.
set -euo pipefail

PY=/usr/bin/python3 # Debian's python3 (python3-torch)
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src_dir=$(cd "$script_dir/.." && pwd)

usage() {
  cat <<EOF
usage: $(basename "$0") [options]
  -B dir    build directory holding bin/ (default: ../build next to this script)
  -r n      repetitions of every measurement, interleaved (3)
  -s size   all-reduce size in bytes, K/M suffixes (64M)
  -n n      all-reduce iterations per measurement (10)
  -R rate   tc tbf rate of the limited run (1gbit); "none" skips it
  -t s      iperf3 seconds per measurement (3)
  -G        skip Gloo (no python3-torch)
  -P prio   run every measured program (tutti, iperf3, Gloo) under SCHED_FIFO priority prio
            (chrt -f): on a shared machine the others' load then stops deciding the ratios
  -h        this text
EOF
  exit "${1:-0}"
}

build="" reps=3 size=64M iters=10 rate=1gbit secs=3 gloo=1 rt=""
while getopts "B:r:s:n:R:t:P:Gh" opt; do
  case $opt in
    B) build=$OPTARG ;; r) reps=$OPTARG ;; s) size=$OPTARG ;; n) iters=$OPTARG ;;
    R) rate=$OPTARG ;; t) secs=$OPTARG ;; G) gloo=0 ;; P) rt=$OPTARG ;; h) usage 0 ;; *) usage 2 ;;
  esac
done
rt_cmd=()
[[ -z $rt ]] || rt_cmd=(chrt -f "$rt")
bin=${build:-$src_dir/build}/bin
[[ -x $bin/all_reduce_perf && -x $bin/tutti-run && -x $bin/net_p2p_perf ]] || { echo "no binaries in $bin (-B)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "needs root (network namespaces)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "needs iperf3" >&2; exit 2; }
if [[ $gloo == 1 ]] && ! $PY -c "import torch.distributed" 2>/dev/null; then
  echo "no PyTorch for $PY (apt-get install python3-torch), or use -G" >&2; exit 2
fi
bytes=$($PY -c "s='$size'; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s))")

export TUTTI_NETNS_PREFIX="${TUTTI_NETNS_PREFIX:-tperf$$-}" # set it to keep test beds apart
bed="$src_dir/scripts/netns-cluster.sh"
tmp=$(mktemp -d)
trap '"$bed" down >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
"$bed" up 2 >/dev/null

on() { local h=$1; shift; "$bed" exec "$h" "${rt_cmd[@]}" "$@"; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

tutti_busbw() { # GB/s from the out-of-place time (us): bytes / time x 2 (n - 1) / n, n = 2
  timeout 300 "${rt_cmd[@]}" "$bin/tutti-run" --hosts h1,h2 "$bin/all_reduce_perf" -b "$bytes" -e "$bytes" -c 0 \
    -n "$iters" -w 2 2>"$tmp/err" | awk '!/^#/ && NF >= 8 {printf "%.4f\n", $1 / $6 / 1e3; exit}'
}
tutti_p2p() { timeout 300 "${rt_cmd[@]}" "$bin/tutti-run" --hosts h1,h2 "$bin/net_p2p_perf" "$bytes" "$iters" 2>>"$tmp/err" | awk '/^p2p/ {print $3}'; }
iperf() { # GB/s received: single stream, or per direction with --bidir
  on h2 iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  on h1 iperf3 -c 192.0.2.2 -p 5201 -t "$secs" -J "$@" >"$tmp/iperf.json" 2>/dev/null || true
  wait $srv 2>/dev/null || true
  $PY - "$tmp/iperf.json" <<'EOF'
import json, sys
e = json.load(open(sys.argv[1]))["end"]
if "sum_received_bidir_reverse" in e:  # --bidir: the mean of both directions
    print("%.4f" % ((e["sum_received"]["bits_per_second"] + e["sum_received_bidir_reverse"]["bits_per_second"]) / 2 / 8e9))
else:
    print("%.4f" % (e["sum_received"]["bits_per_second"] / 8e9))
EOF
}
gloo_busbw() {
  local port=$((20000 + RANDOM % 20000))
  on h2 $PY "$script_dir/net_gloo_allreduce.py" 1 2 192.0.2.1 $port "$bytes" "$iters" >/dev/null 2>>"$tmp/err" &
  local peer=$!
  on h1 timeout 300 $PY "$script_dir/net_gloo_allreduce.py" 0 2 192.0.2.1 $port "$bytes" "$iters" 2>>"$tmp/err" | awk '/^gloo/ {print $4}'
  wait $peer || true
}

echo "# net_compare: 2 hosts x 1 rank over a veth link, fp32 all-reduce of $bytes bytes, $reps rounds${rt:+, under chrt -f $rt}"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
for r in $(seq 1 "$reps"); do
  tutti_busbw >>"$tmp/tutti"
  iperf >>"$tmp/iperf"
  iperf --bidir >>"$tmp/bidir"
  [[ $gloo == 1 ]] && gloo_busbw >>"$tmp/gloo"
  tutti_p2p >>"$tmp/p2p"
  echo "#   round $r: tutti $(tail -1 "$tmp/tutti") iperf3 $(tail -1 "$tmp/iperf") bidir $(tail -1 "$tmp/bidir")" \
       "gloo $([[ $gloo == 1 ]] && tail -1 "$tmp/gloo" || echo -) p2p $(tail -1 "$tmp/p2p") GB/s"
done
T=$(median <"$tmp/tutti") I=$(median <"$tmp/iperf") B=$(median <"$tmp/bidir") P=$(median <"$tmp/p2p")
G=$([[ $gloo == 1 ]] && median <"$tmp/gloo" || echo nan)

if [[ $rate != none ]]; then
  "$bed" rate h1 "$rate"
  "$bed" rate h2 "$rate"
  line=$($PY -c "r='$rate'.lower(); m={'k':1e3,'m':1e6,'g':1e9}; u=r.rstrip('bit'); print((float(u[:-1])*m[u[-1]] if u[-1] in m else float(u))/8e9)")
  for r in $(seq 1 "$reps"); do
    tutti_busbw >>"$tmp/tutti_lim"
    iperf >>"$tmp/iperf_lim"
    echo "#   limited round $r: tutti $(tail -1 "$tmp/tutti_lim") iperf3 $(tail -1 "$tmp/iperf_lim") GB/s"
  done
  TL=$(median <"$tmp/tutti_lim") IL=$(median <"$tmp/iperf_lim")
fi

echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
$PY - "$T" "$I" "$B" "$G" "$P" "${TL:-nan}" "${IL:-nan}" "${line:-nan}" "$rate" <<'EOF'
import math, sys
t, i, b, g, p, tl, il, line = map(float, sys.argv[1:9])
rate = sys.argv[9]
ok = True
def row(name, value, ref, target, refname):
    global ok
    if math.isnan(value) or math.isnan(ref):
        ok &= target is None
        verdict = "" if target is None else "   FAIL (not measured)"
        print(f"{name:44s} {value:8.3f} GB/s   ({refname}: n/a){verdict}")
        return
    ratio = value / ref
    good = target is None or ratio >= target
    ok &= good
    tgt = "" if target is None else f"   target >= {target:.2f}: {'PASS' if good else 'FAIL'}"
    print(f"{name:44s} {value:8.3f} GB/s   {ratio:6.2f} x {refname} ({ref:.3f}){tgt}")
print("# medians (GB = 1e9 bytes)")
row("tutti all-reduce busbw", t, i, 0.8, "iperf3 single stream")
row("tutti all-reduce busbw", t, b, None, "iperf3 --bidir per direction")
row("tutti all-reduce busbw", t, g, 1.5, "Gloo all-reduce busbw")
row("tutti send/recv one way", p, i, None, "iperf3 single stream")
if not math.isnan(line):
    row(f"tutti all-reduce busbw, link at {rate}", tl, line, 0.9, f"line rate {rate}")
    row(f"iperf3 single stream, link at {rate}", il, line, None, f"line rate {rate}")
print("# targets: " + ("all PASS" if ok else "some FAIL"))
sys.exit(0 if ok else 1)
EOF
