#!/usr/bin/env bash
# The cost of a setting that turns a check on (docs/hardening.md): all_reduce_perf under
# tutti-run with SETTING=0 and SETTING=1, interleaved (0, 1, 0, 1, ...), PAIRS pairs; prints the
# median out-of-place time per size of each and their ratio. Meant to run under the measure lock:
#   flock /tmp/tutti-measure.lock chrt -f 10 scripts/measure_setting.sh SETTING NRANKS PAIRS \
#     MINBYTES MAXBYTES FACTOR
# e.g. TUTTI_CHECK_COLL 4 15 8 8M 32; TUTTI_CHECKSUM over tcp: TUTTI_SHM_DISABLE=1 in the
# environment, TUTTI_CHECKSUM 2 9 64K 64M 4.
set -euo pipefail
cd "$(dirname "$0")/.."
setting=${1:?usage: measure_setting.sh SETTING NRANKS PAIRS MINBYTES MAXBYTES FACTOR}
n=${2:-4}
pairs=${3:-5}
range=(-b "${4:-8}" -e "${5:-8M}" -f "${6:-32}")
bin=build/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 "$pairs"); do
  for on in 0 1; do
    env "$setting=$on" "$bin/tutti-run" -n "$n" "$bin/all_reduce_perf" "${range[@]}" \
      -n 100 -w 10 -c 1 | awk -v on="$on" '$1 ~ /^[0-9]+$/ && NF >= 9 { print on, $1, $6, $9 }' \
      >>"$tmp/times"
  done
done
# on size time_out_of_place wrong
awk '$4 != 0 { print "wrong results at " $2 " bytes" > "/dev/stderr" } { print $2, $1, $3 }' "$tmp/times" | sort -k1,1n -k2,2n -k3,3g |
  awk -v pairs="$pairs" '
    { key = $1 " " $2; t[key, ++c[key]] = $3; sizes[$1] = 1 }
    END {
      printf "%10s %20s %20s %8s   (%d ranks, medians of %d interleaved runs, us)\n", \
        "bytes", "'"$setting"'=0", "'"$setting"'=1", "ratio", '"$n"', pairs
      for (s in sizes) order[++k] = s + 0
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (order[j] < order[i]) { x = order[i]; order[i] = order[j]; order[j] = x }
      for (i = 1; i <= k; i++) {
        s = order[i]; m0 = t[s " 0", int((c[s " 0"] + 1) / 2)]; m1 = t[s " 1", int((c[s " 1"] + 1) / 2)]
        printf "%10d %20.1f %20.1f %8.2f\n", s, m0, m1, m1 / m0
      }
    }'
