#!/usr/bin/python3
"""PyTorch over tutti against PyTorch over Gloo, in the same run, interleaved.

Every rank holds a default "tutti" group and a "gloo" group of the same ranks. Measured:
  1. DDP training samples/s on Fashion-MNIST, the MLP and the CNN of tutti-train (examples/
     torch_ddp.py's models), batch --batch per rank, one thread per rank, AdamW;
  2. torch.distributed.all_reduce time of fp32 tensors from 1 KiB to 256 MiB.
Each measurement alternates tutti and gloo --reps times; rank 0 prints medians and ratios. The DDP
measurement also times the models without DDP (no communication), the ceiling for both.
Launch 2 ranks, e.g.  perf/torch_bench.sh  (tests/torch/launch.py -n 2 perf/torch_bench.py).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from torch_ddp import load_fashion_mnist, make_model  # noqa: E402  (also registers "tutti")


def ddp_rate(model, opt, x, y, steps, batch, rank, world, group):
    loss_fn = nn.CrossEntropyLoss()
    dist.barrier(group=group)
    start = time.perf_counter()
    for s in range(steps):
        idx = (s * batch * world + rank + torch.arange(batch) * world) % x.shape[0]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    dist.barrier(group=group)
    return steps * batch * world / (time.perf_counter() - start)


def bench_ddp(kind, a, x, y, rank, world, groups):
    """Samples/s of DDP over each group, and of "local": the same model without DDP (every rank
    trains alone, no communication), the ceiling any backend can reach on these CPUs."""
    nets, opts, barrier_groups = {}, {}, dict(groups, local=groups["gloo"])
    for name, g in barrier_groups.items():
        torch.manual_seed(1)
        nets[name] = make_model(kind)
        if name != "local":
            nets[name] = nn.parallel.DistributedDataParallel(nets[name], process_group=g)
        opts[name] = torch.optim.AdamW(nets[name].parameters(), lr=1e-3)
        ddp_rate(nets[name], opts[name], x, y, 3, a.batch, rank, world, g)  # warm-up
    rates = {name: [] for name in barrier_groups}
    for _ in range(a.reps):
        for name, g in barrier_groups.items():
            rates[name].append(ddp_rate(nets[name], opts[name], x, y, a.steps, a.batch, rank,
                                        world, g))
    med = {k: statistics.median(v) for k, v in rates.items()}
    # Each rep's tutti and gloo windows ran back to back: their ratio sees the same machine state
    # (the pairs' spread shows the noise; the headline ratio stays the ratio of the medians).
    med["pairs"] = [t / g for t, g in zip(rates["tutti"], rates["gloo"])]
    return med


def allreduce_time(t, iters, group):
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - start) / iters


def bench_allreduce(nbytes, a, groups):
    t = torch.ones(nbytes // 4)
    iters = max(1, min(200, (64 << 20) // nbytes))
    for g in groups.values():
        allreduce_time(t, 1, g)
    times = {name: [] for name in groups}
    for _ in range(a.reps):
        for name, g in groups.items():
            times[name].append(allreduce_time(t, iters, g))
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=40, help="DDP steps per measurement")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--min-bytes", type=int, default=1 << 10)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("tutti")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"tutti": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    out = print if rank == 0 else (lambda *args, **kw: None)
    out(f"# torch_bench: {world} ranks, {a.reps} interleaved reps, medians", flush=True)
    if a.models:
        x, y = load_fashion_mnist(a.data)
        for kind in a.models.split(","):
            r = bench_ddp(kind, a, x, y, rank, world, groups)
            out(f"ddp {kind:3s} batch {a.batch}/rank: tutti {r['tutti']:8.0f} samples/s  gloo "
                f"{r['gloo']:8.0f} samples/s  tutti/gloo {r['tutti'] / r['gloo']:.2f}x  "
                f"(no communication: {r['local']:8.0f} samples/s)", flush=True)
            out(f"ddp {kind:3s} tutti/gloo per rep: " + " ".join(f"{q:.2f}" for q in r["pairs"]) +
                f"  (median {statistics.median(r['pairs']):.2f})", flush=True)
    nbytes = a.min_bytes
    while nbytes <= a.max_bytes:
        r = bench_allreduce(nbytes, a, groups)
        out(f"all_reduce fp32 {nbytes:>10d} B: tutti {r['tutti'] * 1e6:10.1f} us  gloo "
            f"{r['gloo'] * 1e6:10.1f} us  tutti/gloo time {r['tutti'] / r['gloo']:.2f}", flush=True)
        nbytes *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
