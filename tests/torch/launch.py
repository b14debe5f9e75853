#!/usr/bin/python3
"""Runs one Python script as N ranks on this host, torchrun-style (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK), and fails unless every rank exits 0 within the limit.

    /usr/bin/python3 tests/torch/launch.py -n 4 [--limit 300] script.py [args...]
"""
import argparse
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, required=True)
    p.add_argument("--limit", type=float, default=300, help="seconds for the whole job")
    p.add_argument("--expect-last", type=int, default=0,
                   help="exit code expected from the last rank (test_kill.py's victim)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    port = free_port()
    procs = []
    for r in range(a.n):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, a.script] + a.args, env=env))
    deadline = time.time() + a.limit
    codes = [None] * a.n
    while None in codes and time.time() < deadline:
        codes = [pr.poll() for pr in procs]
        time.sleep(0.05)
    for r, pr in enumerate(procs):
        if codes[r] is None:
            pr.kill()
            print(f"launch: rank {r} still running after {a.limit} s: killed", flush=True)
            codes[r] = -9
    want = [0] * (a.n - 1) + [a.expect_last]
    bad = [(r, c) for r, c in enumerate(codes) if c != want[r]]
    if bad:
        print(f"launch: ranks failed (rank, exit code): {bad}", flush=True)
        sys.exit(1)
    print(f"launch: {a.n} ranks passed", flush=True)


if __name__ == "__main__":
    main()
