#!/usr/bin/env bash
# netns-cluster.sh: a multi-host test bed on one machine (needs root).
#
# Each host is a network namespace <prefix>hN with one interface, eth0 = 192.0.2.N/24, cabled
# by a veth pair to a bridge that lives in its own namespace <prefix>sw (the "switch"), so the
# machine's own namespace gets no new device. Commands run on a host in a new UTS namespace
# whose hostname is hN, so tutti sees K different hosts (host identity = hostname + boot id).
#
#   netns-cluster.sh up K [--rate R] [--ipv6|--ipv6-only] [--cc CC]
#                                      create hosts h1..hK (R: tc tbf rate per link, e.g. 1gbit;
#                                      --ipv6: also 2001:db8::N/64; --ipv6-only: only that;
#                                      CC: the hosts' TCP congestion control, default cubic, or
#                                      reno where the kernel lets a namespace take only that)
#   netns-cluster.sh down              remove everything this prefix created (idempotent)
#   netns-cluster.sh exec HOST cmd...  run cmd on HOST (network namespace + hostname)
#   netns-cluster.sh pids HOST         pids of every process on HOST
#   netns-cluster.sh kill HOST         SIGKILL every process on HOST
#   netns-cluster.sh link HOST up|down plug or unplug HOST's cable (at the switch)
#   netns-cluster.sh rate HOST R|none  limit HOST's link to R in both directions, or unlimit it
#   netns-cluster.sh addr HOST         HOST's address (192.0.2.N)
#   netns-cluster.sh list              hosts of this prefix
#
# The prefix is TUTTI_NETNS_PREFIX (default "tutti-"); `tutti-run --hosts h1,h2` enters the
# same namespaces. `up` tears down what it made if any step fails; use `down` (or a trap that
# calls it) after tests, also failed ones.
set -Eeuo pipefail # -E: the ERR trap of `up` also fires inside functions

P=${TUTTI_NETNS_PREFIX:-tutti-}
SW=${P}sw

die() { echo "netns-cluster: $*" >&2; exit 1; }
host_ns() { [[ $1 =~ ^h([0-9]+)$ ]] || die "host names are h1, h2, ... (got '$1')"; echo "${P}$1"; }
host_num() { echo "${1#h}"; }
hosts() { ip netns list | awk '{print $1}' | sed -n "s/^${P}\(h[0-9][0-9]*\)$/\1/p" | sort -V; }

set_rate() { # set_rate HOST RATE|none: tbf on both ends of HOST's cable
  local h=$1 rate=$2 ns
  ns=$(host_ns "$h")
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  ip netns exec "$SW" tc qdisc del dev "$h" root 2>/dev/null || true
  [[ $rate == none ]] && return 0
  # burst: a few ms of line rate (at least 64 KiB: GSO packets). Queue: at the switch's port
  # 20 ms; at the host's NIC more than its TCP sockets ever hand it (64 MB), as a real NIC's
  # driver ring pushes back on the sockets (TCP small queues) instead of dropping: with 20 ms
  # there too, a tree's several flows out of one host overflowed it at 8 MiB (hundreds of drops
  # per run, 8 MiB took 3x the time of 4 MiB, where the switch dropped nothing)
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb limit 64mb
  ip netns exec "$SW" tc qdisc add dev "$h" root tbf rate "$rate" burst 256kb latency 20ms
}

set_cc() { # set_cc NS CC|auto: the host's TCP congestion control
  # auto: a loss-based one. The bed never drops (see set_rate), so such a control keeps its
  # window open and a link runs at its rate whenever it has data, as tutti-sim's pipes do. A
  # machine's default may be BBR (the AMD guests' is), whose pacing follows bandwidth samples
  # taken while a collective's flows were idle or sharing the link: there the tree all-reduce
  # on 4 hosts ran 15-30% slower than the model at 1-2 MiB and twice as slow at 128 KiB in some
  # runs (docs/simulator.md, "Validation"). A namespace may take only the kernel's allowed
  # controls (tcp_allowed_congestion_control): cubic, else reno.
  local ns=$1 cc=$2 c
  if [[ $cc != auto ]]; then
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc" ||
      die "congestion control '$cc' not allowed in a namespace (tcp_allowed_congestion_control)"
    return 0
  fi
  for c in cubic reno; do
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$c" 2>/dev/null && return 0
  done
  echo "netns-cluster: warning: $ns keeps $(ip netns exec "$ns" sysctl -n net.ipv4.tcp_congestion_control)" >&2
}

cmd_down() {
  local h
  for h in $(hosts); do
    ip netns pids "${P}$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "${P}$h" 2>/dev/null || true
  done
  ip netns del "$SW" 2>/dev/null || true
}

cmd_up() {
  local k=${1:-} rate=none v4=1 v6=0 cc=auto
  shift || true
  [[ $k =~ ^[1-9][0-9]*$ && $k -le 200 ]] || die "usage: up K [--rate R] (K hosts, 1..200)"
  while [[ $# -gt 0 ]]; do
    case $1 in
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --ipv6) v6=1; shift ;;
      --ipv6-only) v6=1 v4=0; shift ;;
      --cc) cc=${2:?--cc needs a value}; shift 2 ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  [[ $(id -u) == 0 ]] || die "needs root (ip netns)"
  ip netns list | awk '{print $1}' | grep -qx "$SW" && die "a cluster with prefix '$P' exists: run down first"
  trap 'cmd_down; trap - ERR; exit 1' ERR
  ip netns add "$SW"
  ip -n "$SW" link set lo up
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up
  for i in $(seq 1 "$k"); do
    local ns=${P}h$i
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$SW" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$SW" link set "h$i" master br0 up
    [[ $v4 == 1 ]] && ip -n "$ns" addr add "192.0.2.$i/24" dev eth0
    [[ $v6 == 1 ]] && ip -n "$ns" addr add "2001:db8::$i/64" dev eth0 nodad
    ip -n "$ns" link set eth0 up
    set_cc "$ns" "$cc"
    set_rate "h$i" "$rate"
  done
  trap - ERR
  echo "netns-cluster: $k hosts up (prefix '$P', link rate: $rate, TCP congestion control: $(ip netns exec "${P}h1" sysctl -n net.ipv4.tcp_congestion_control))"
}

cmd_exec() {
  local h=${1:?exec HOST cmd...}
  shift
  [[ $# -gt 0 ]] || die "exec: no command"
  local ns
  ns=$(host_ns "$h")
  exec ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  exec) shift; cmd_exec "$@" ;;
  pids) ip netns pids "$(host_ns "${2:?pids HOST}")" ;;
  kill) ip netns pids "$(host_ns "${2:?kill HOST}")" | xargs -r kill -9 ;;
  link)
    h=${2:?link HOST up|down}; host_ns "$h" >/dev/null
    [[ ${3:-} == up || ${3:-} == down ]] || die "link HOST up|down"
    ip -n "$SW" link set "$h" "$3" ;;
  rate) set_rate "${2:?rate HOST R|none}" "${3:?rate HOST R|none}" ;;
  addr) h=${2:?addr HOST}; host_ns "$h" >/dev/null; echo "192.0.2.$(host_num "$h")" ;;
  list) hosts ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
