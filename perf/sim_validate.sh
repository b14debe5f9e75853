#!/usr/bin/env bash
# perf/sim_validate.sh: tutti-sim's predictions against measurements on the namespace test bed.
#
#   perf/sim_validate.sh [-B BUILD] [-r RATE] [-R REPS] [-e MAXBYTES] [-a "ALGOS"] [-o OUTDIR]
#
# 1. scripts/netns-cluster.sh up 4 --rate RATE (tc tbf on every host's link, default 500mbit so
#    that the network, not the 2 CPUs, dominates), prefix TUTTI_NETNS_PREFIX (default simval-);
#    torn down on exit, also on failure.
# 2. Calibration on the same bed (perf/sim_validate.py fit), nothing tuned per point:
#    bandwidths: 2-rank sendrecv_perf across hosts (h1,h2) and inside a host (h1:2), slope of
#      time between 4 MiB and 16 MiB;
#    latencies: the same runs, median time at <= 512 B (a 2-rank exchange is one hop);
#    peak: 2-rank sendrecv_perf across hosts with the rate limit lifted (for the tbf model);
#    CPU time per message: 8-rank sendrecv_perf on the bed (every rank sends one message to the
#      next at once; all 4 hosts share this machine's CPUs), median time at <= 512 B: with the
#      ranks placed round robin (h1,h2,h3,h4,h1,...) all 8 messages cross the network, so one
#      across hosts takes that x CPUs / 8; with hosts in blocks (h1:2,...) 4 of them do, which
#      leaves (time x CPUs - 4 x that) / 4 for one through shared memory.
# 3. Measurement: all_reduce_perf on 4 hosts x 2 ranks (tutti-run --hosts h1:2,...,h4:2) for each
#    algorithm forced with TUTTI_ALGO and for the automatic choice ("auto"), 8 B - MAXBYTES
#    (oneshot up to 16 KiB, its limit), iterations min(100, max(3, 16 MiB / size)) after
#    min(200, 1 MiB / size) untimed ones at the same size (--warmup-bytes: the tbf burst is
#    spent before every size, so each is measured at the limited rate the model has), REPS
#    repetitions with the algorithm order rotating; the library's tuner gets the calibrated
#    constants (TUTTI_TUNER_{SHM,NET}_{LAT_US,GBPS}, TUTTI_TUNER_{,SHM_}MSG_CPU_US), the same the
#    simulator uses.
# 4. tutti-sim with the calibrated cluster (4 nodes x 2, 1 NIC; the 4 nodes one machine of
#    $(nproc) CPUs, --cpus --machine-nodes 4 --msg-cpu-us), its NICs as tc's token bucket
#    (--inter-burst 256K, the bed's tbf burst, at the measured peak) and as a plain rate, then
#    per algorithm and size: measured (median of REPS), predicted, error %, and PASS/FAIL for
#    the issue's targets (the tuner's: the algorithm it picked, logged by the auto runs, against
#    the fastest, both forced; auto's own measured time is reported beside it) (the simulator's target judged on the token-bucket model: the bed's
#    links are tc tbf, whose bursts give back the idle time of trees and exchanges).
# Everything lands in OUTDIR (default out/sim_validate): raw outputs, sim*.txt, report.txt.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=$ROOT/build RATE=500mbit REPS=3 MAXB=64M OUT=out/sim_validate
ALGOS="ring oneshot hier tree rhd rd auto"
while getopts "B:r:R:e:a:o:h" opt; do
  case $opt in
    B) BUILD=$OPTARG ;; r) RATE=$OPTARG ;; R) REPS=$OPTARG ;; e) MAXB=$OPTARG ;;
    a) ALGOS=$OPTARG ;; o) OUT=$OPTARG ;;
    *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
export TUTTI_NETNS_PREFIX=${TUTTI_NETNS_PREFIX:-simval-}
NS=$ROOT/scripts/netns-cluster.sh
BIN=$BUILD/bin
for p in tutti-run tutti-sim all_reduce_perf sendrecv_perf; do
  [[ -x $BIN/$p ]] || { echo "sim_validate: $BIN/$p not built" >&2; exit 2; }
done
mkdir -p "$OUT"
"$NS" down
trap '"$NS" down' EXIT
"$NS" up 4 --rate "$RATE"
echo "# $(date -u +%FT%TZ) rate $RATE, load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

run() { # run HOSTS NRANKS OUTFILE prog args...
  local hosts=$1 n=$2 out=$3
  shift 3
  timeout 1200 "$BIN/tutti-run" --hosts "$hosts" -n "$n" "$BIN/$1" "${@:2}" >"$out" 2>&1 ||
    { echo "sim_validate: failed: $* on $hosts (see $out)" >&2; tail -5 "$out" >&2; return 1; }
}

BED=h1:2,h2:2,h3:2,h4:2
CAL=(-b 8 -e 16M -f 4 -w 1 -n 20 --iter-bytes 32M -c 0)
for r in $(seq 1 "$REPS"); do
  run h1,h2 2 "$OUT/cal_inter.$r.txt" sendrecv_perf "${CAL[@]}"
  run h1:2 2 "$OUT/cal_intra.$r.txt" sendrecv_perf "${CAL[@]}"
  run $BED 8 "$OUT/cal_cpu.$r.txt" sendrecv_perf -b 8 -e 512 -f 4 -w 1 -n 50 -c 0
  run h1,h2,h3,h4,h1,h2,h3,h4 8 "$OUT/cal_cpunet.$r.txt" sendrecv_perf -b 8 -e 512 -f 4 -w 1 -n 50 -c 0
done
"$NS" rate h1 none && "$NS" rate h2 none
run h1,h2 2 "$OUT/cal_peak.1.txt" sendrecv_perf -b 16M -e 16M -w 2 -n 10 -c 0
"$NS" rate h1 "$RATE" && "$NS" rate h2 "$RATE"
CPUS=$(nproc)
eval "$(python3 "$HERE/sim_validate.py" fit "$OUT" "$CPUS")"
echo "# calibration: net $INTER_LAT_US us, $INTER_GBPS Gbit/s (peak $PEAK_GBPS); shm $INTRA_LAT_US us, $INTRA_GBPS Gbit/s; CPU per message $MSG_CPU_US us across hosts, $SHM_MSG_CPU_US us through shm ($CPUS CPUs)"
export TUTTI_TUNER_NET_LAT_US=$INTER_LAT_US TUTTI_TUNER_NET_GBPS=$INTER_GBYTES
export TUTTI_TUNER_SHM_LAT_US=$INTRA_LAT_US TUTTI_TUNER_SHM_GBPS=$INTRA_GBYTES
export TUTTI_TUNER_MSG_CPU_US=$MSG_CPU_US TUTTI_TUNER_SHM_MSG_CPU_US=$SHM_MSG_CPU_US

read -r -a algos <<<"$ALGOS"
for r in $(seq 1 "$REPS"); do
  k=$(( (r - 1) % ${#algos[@]} ))
  for a in "${algos[@]:k}" "${algos[@]:0:k}"; do # rotate the order from one repetition to the next
    e=$MAXB
    [[ $a == oneshot ]] && e=16K
    echo "# rep $r: $a (load $(cut -d' ' -f1 /proc/loadavg))"
    if [[ $a == auto ]]; then
      (unset TUTTI_ALGO; export TUTTI_DEBUG=INFO TUTTI_DEBUG_SUBSYS=TUNING # logs each pick
       run $BED 8 "$OUT/ar.$a.$r.txt" all_reduce_perf \
        -b 8 -e "$e" -f 2 -w 1 -n 100 --iter-bytes 16M --warmup-bytes 1M -c 0)
    else
      TUTTI_ALGO=$a run $BED 8 "$OUT/ar.$a.$r.txt" all_reduce_perf \
        -b 8 -e "$e" -f 2 -w 1 -n 100 --iter-bytes 16M --warmup-bytes 1M -c 0
    fi
  done
done

SIM="$BIN/tutti-sim --nodes 4 --ppn 2 --nics 1 --inter-lat-us $INTER_LAT_US --inter-gbps $INTER_GBPS"
SIM+=" --intra-lat-us $INTRA_LAT_US --intra-gbps $INTRA_GBPS -c all_reduce -b 8 -e $MAXB -f 2"
SIM+=" --cpus $CPUS --machine-nodes 4 --msg-cpu-us $MSG_CPU_US --intra-msg-cpu-us $SHM_MSG_CPU_US"
SIM+=" -a $(echo "$ALGOS" | tr ' ' ,)"
TBF="$SIM --inter-burst 256K --inter-peak-gbps $PEAK_GBPS" # netns-cluster.sh: tbf burst 256kb
python3 "$HERE/sim_validate.py" report "$OUT" "$TBF" "$SIM" | tee "$OUT/report.txt"
echo "# done $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
