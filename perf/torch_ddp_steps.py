#!/usr/bin/python3
"""Where a DDP step's time goes, per backend: step-time medians of the model without DDP (no
communication), with DDP over tutti and over Gloo, and the same two with a timing comm hook
that first all-reduces one element (the wait for the other rank) and then the bucket (the
all-reduce itself; Gloo's returns before its all-reduce is done, so its second figure is the
time to issue it); each rank prints its medians and the hook's, per bucket (index, elements).

    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824 \\
    PYTHONPATH=build/python flock /tmp/tutti-measure.lock chrt -f 10 /usr/bin/python3 \\
        tests/torch/launch.py -n 2 perf/torch_ddp_steps.py [--model mlp|cnn] [--reps 5] [--steps 30]
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

hook_times = {}  # (variant, bucket index, elements) -> [(wait s, all-reduce s)]


def timing_hook(state, bucket):
    name, group, world = state
    buf = bucket.buffer()
    buf.div_(world)  # with a comm hook DDP leaves the averaging to the hook
    one = torch.zeros(1)
    t0 = time.perf_counter()
    dist.all_reduce(one, group=group)
    t1 = time.perf_counter()
    fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
    t2 = time.perf_counter()
    hook_times.setdefault((name, bucket.index(), buf.numel()), []).append((t1 - t0, t2 - t1))
    return fut.then(lambda f: f.value()[0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("tutti")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"tutti": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    x, y = load_fashion_mnist(a.data)
    loss_fn = nn.CrossEntropyLoss()
    nets = {}
    for name in ["local", "tutti", "gloo", "tutti+hook", "gloo+hook"]:
        torch.manual_seed(1)
        m = make_model(a.model)
        if name != "local":
            g = groups[name.split("+")[0]]
            m = nn.parallel.DistributedDataParallel(m, process_group=g)
            if name.endswith("+hook"):
                m.register_comm_hook((name, g, world), timing_hook)
        nets[name] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3))
    times = {name: [] for name in nets}
    for rep in range(a.reps):
        for name, (m, opt) in nets.items():
            dist.barrier(group=groups["gloo"])
            for s in range(a.steps):
                idx = (s * a.batch * world + rank + torch.arange(a.batch) * world) % x.shape[0]
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss_fn(m(x[idx]), y[idx]).backward()
                opt.step()
                if rep > 0 or s >= 5:  # DDP rebuilds its buckets after the first step
                    times[name].append(time.perf_counter() - t0)
    for r in range(world):
        dist.barrier(group=groups["gloo"])
        if r != rank:
            continue
        print(f"rank {rank} {a.model} ms/step: " + "  ".join(
            f"{k} {statistics.median(v) * 1e3:.2f}" for k, v in times.items()), flush=True)
        for k, v in sorted(hook_times.items()):
            print(f"  {k[0]} bucket {k[1]} ({k[2]} elements, {len(v)} calls): wait "
                  f"{statistics.median(w for w, _ in v) * 1e6:.0f} us, all-reduce "
                  f"{statistics.median(t for _, t in v) * 1e6:.0f} us", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
