#!/usr/bin/python3
"""net_gloo_allreduce.py: PyTorch's Gloo backend, fp32 all-reduce (sum), the peer tutti's TCP
transport is compared with in perf/net_compare.sh (same hosts, same sizes, same run).

    net_gloo_allreduce.py RANK WORLD ADDR PORT BYTES ITERS

Each rank runs on its own namespace host (netns-cluster.sh exec hN ...); rank 0's ADDR:PORT is
the rendezvous (init_method tcp://). Rank 0 prints "gloo BYTES TIME_US BUSBW_GBS" with
nccl-tests' bus bandwidth, busbw = bytes / time * 2 (n - 1) / n, GB = 1e9 bytes. The first
result is checked against the closed form (every element = n (n + 1) / 2).
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank, world, addr, port, nbytes, iters = sys.argv[1:7]
    rank, world, port, nbytes, iters = int(rank), int(world), int(port), int(nbytes), int(iters)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
    t = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32)
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    if t[0].item() != want or t[-1].item() != want:
        print(f"gloo: wrong result {t[0].item()} (want {want})", file=sys.stderr)
        sys.exit(1)
    for _ in range(2):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    dt = (time.perf_counter() - t0) / iters
    if rank == 0:
        print(f"gloo {nbytes} {dt * 1e6:.1f} {nbytes / dt * 2 * (world - 1) / world / 1e9:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
