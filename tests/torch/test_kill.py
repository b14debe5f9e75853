#!/usr/bin/python3
"""A killed rank makes the survivors raise within the group's timeout, never hang.

The last rank exits abruptly (os._exit, as a crash would) after a first all-reduce; the others
keep all-reducing and must get a RuntimeError naming their rank within TIMEOUT seconds of the
death (plus a few seconds of slack for this loaded machine's scheduling); they then exit 0.
"""
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import tutti_torch  # noqa: F401

TIMEOUT = 10.0
SLACK = 5.0


def main():
    torch.set_num_threads(1)
    dist.init_process_group("tutti", timeout=timedelta(seconds=TIMEOUT))
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    assert t[0].item() == world
    if rank == world - 1:
        os._exit(3)  # launch.py is told to expect this code from this rank
    start = time.time()
    try:
        while time.time() - start < 3 * TIMEOUT:
            dist.all_reduce(t)
    except RuntimeError as e:
        took = time.time() - start
        print(f"rank {rank}: raised after {took:.1f} s: {str(e).splitlines()[0]}", flush=True)
        assert f"rank {rank}" in str(e), "the error names no rank"
        assert took <= TIMEOUT + SLACK, f"took {took:.1f} s, timeout {TIMEOUT} s"
        os._exit(0)
    raise SystemExit(f"rank {rank}: no error within {3 * TIMEOUT} s of the peer's death")


if __name__ == "__main__":
    main()
