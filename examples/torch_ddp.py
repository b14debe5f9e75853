#!/usr/bin/python3
"""PyTorch DDP on Fashion-MNIST over tutti: the MLP and the CNN of tutti-train.

Run it with Debian's /usr/bin/python3 (it has python3-torch) and the module on PYTHONPATH:

  # tutti-run starts the ranks and sets torchrun's variables
  PYTHONPATH=build/python build/bin/tutti-run -n 2 /usr/bin/python3 examples/torch_ddp.py
  # or set torchrun's environment by hand, one process per rank (here on one host)
  for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
      PYTHONPATH=build/python /usr/bin/python3 examples/torch_ddp.py --model cnn & done; wait

Debian 12's torchrun (PyTorch 1.13 on Python 3.11) crashes in elastic/multiprocessing/api.py
before it starts a process; where torchrun works, `torchrun --nproc_per_node 2
examples/torch_ddp.py` runs it unchanged. Options: --model mlp|cnn, --batch (per rank),
--steps, --backend (tutti or gloo, to compare).
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

import tutti_torch  # noqa: F401  (registers backend "tutti")

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST pixel statistics (as tutti-train normalizes)


def load_fashion_mnist(data_dir):
    def read(name, offset):
        with gzip.open(os.path.join(data_dir, name)) as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)
    x = read("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32)
    y = read("train-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return (torch.from_numpy(x) / 255.0 - MEAN) / STD, torch.from_numpy(y)


def make_model(kind):
    if kind == "mlp":  # 784 -> 512 -> 256 -> 10
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    # conv5x5 32, pool, conv5x5 64, pool, 3136 -> 512 -> 10 (pool before ReLU, as tutti-train)
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.MaxPool2d(2), nn.ReLU(),
                         nn.Conv2d(32, 64, 5, padding=2), nn.MaxPool2d(2), nn.ReLU(),
                         nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--backend", default="tutti")
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(a.backend)  # env:// : RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = load_fashion_mnist(a.data)
    torch.manual_seed(1)
    model = nn.parallel.DistributedDataParallel(make_model(a.model))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(1))
    global_batch = a.batch * world
    dist.barrier()
    start = time.time()
    for step in range(a.steps):
        idx = perm[(step * global_batch + rank + torch.arange(a.batch) * world) % x.shape[0]]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if rank == 0 and step % 50 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    dist.barrier()
    secs = time.time() - start
    if rank == 0:
        print(f"{a.model} over {a.backend}, {world} ranks: {a.steps * global_batch / secs:.0f} "
              f"samples/s, final loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
