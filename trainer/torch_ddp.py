#!/usr/bin/python3
"""The PyTorch DistributedDataParallel peer of tutti-train, for trainer/compare_torch.sh.

Same data (Fashion-MNIST, normalized the same way), same models (layer for layer), same batch,
optimizer and update rule; DDP over Gloo with its defaults (25 MB buckets, first bucket 1 MB),
one thread per rank. Launch one process per rank with torchrun-style environment:

    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 trainer/torch_ddp.py --model cnn

Rank 0 prints "torch-ddp: ... N samples/s after the first W steps" (the measured steps run
between two barriers, as tutti-train's steady figure).
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

MEAN, STD = 0.2860, 0.3530


def load(data_dir):
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


def make_model(kind):
    if kind == "mlp":  # 784 -> 512 -> 256 -> 10
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    # conv5x5 32, pool, conv5x5 64, pool, 3136 -> 512 -> 10. Pool before ReLU, as tutti-train
    # does: the same function as ReLU then pool (ReLU commutes with max), 4x less ReLU work.
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.MaxPool2d(2), nn.ReLU(),
        nn.Conv2d(32, 64, 5, padding=2), nn.MaxPool2d(2), nn.ReLU(),
        nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn", choices=["mlp", "cnn"])
    p.add_argument("--batch", type=int, default=64, help="per-rank batch")
    p.add_argument("--optim", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--wd", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=100, help="measured steps")
    p.add_argument("--warmup", type=int, default=5, help="steps before the measurement")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    x, y = load(a.data)
    model = make_model(a.model)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    if a.optim == "adamw":
        opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, weight_decay=a.wd)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9, weight_decay=a.wd)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(x.shape[0], generator=g)
    G = a.batch * world

    def step(s):
        idx = perm[(s * G + rank + torch.arange(a.batch) * world) % x.shape[0]]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()

    for s in range(a.warmup):
        step(s)
    dist.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for s in range(a.warmup, a.warmup + a.steps):
        step(s)
    dist.barrier()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0  # cpu: all our threads
    if rank == 0:
        print(f"torch-ddp: {a.model} {a.optim} {world} ranks x batch {a.batch}, torch "
              f"{torch.__version__}: {a.steps * G / dt:.0f} samples/s after the first "
              f"{a.warmup} steps ({a.steps} steps, {dt:.1f}s) "
              f"({a.steps * a.batch / cpu:.0f} samples per CPU-second per rank)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
