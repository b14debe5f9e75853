#!/usr/bin/python3
"""DDP training with backend "tutti" gives the same parameters as with "gloo".

Two ranks train two copies of the same model (same seed, same batches) side by side, one DDP
over the default "tutti" group and one over a "gloo" group of the same ranks, for --steps
steps of SGD, then compare every parameter. With 2 ranks each gradient element is reduced as
a + b (then scaled by 1/2, a power of two: exact), and IEEE addition of two terms is
commutative and correctly rounded, so any summation order gives the same bits: the tolerance
derived from the summation order is 0 and the parameters must be equal bit for bit.
"""
import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import tutti_torch  # noqa: F401


def model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("tutti")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "the exact-equality argument needs 2 ranks"
    gloo = dist.new_group(backend="gloo")
    nets = {"tutti": nn.parallel.DistributedDataParallel(model()),
            "gloo": nn.parallel.DistributedDataParallel(model(), process_group=gloo)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for k, m in nets.items()}
    g = torch.Generator().manual_seed(7 + rank)  # each rank its own batches
    loss_fn = nn.CrossEntropyLoss()
    for step in range(a.steps):
        x = torch.randn(32, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
        for k in nets:
            opts[k].zero_grad(set_to_none=True)
            loss_fn(nets[k](x), y).backward()
            opts[k].step()
    worst = 0.0
    for (n, pt), (_, pg) in zip(nets["tutti"].named_parameters(), nets["gloo"].named_parameters()):
        d = (pt - pg).abs().max().item()
        worst = max(worst, d)
        if not torch.equal(pt, pg):
            print(f"rank {rank}: parameter {n} differs after {a.steps} steps: max |diff| {d}")
            sys.exit(1)
    moved = (nets["tutti"].module[1].weight - model()[1].weight).abs().max().item()
    assert moved > 1e-3, "training did not change the parameters"
    print(f"rank {rank}: {a.steps} DDP steps, tutti == gloo bit for bit (max |diff| {worst}), "
          f"parameters moved up to {moved:.3g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
