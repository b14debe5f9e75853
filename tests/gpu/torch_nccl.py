"""PyTorch's own NCCL backend on tutti's libnccl.so.2 (run by tests/gpu/run.sh on a GPU machine).

    LD_PRELOAD=<build>/lib/libnccl.so.2 TUTTI_DEBUG=INFO python torch_nccl.py [nranks]

Spawns nranks processes (default 2), all on GPU 0 (NVIDIA's NCCL refuses two ranks on one GPU;
tutti allows it), with backend "nccl" on CUDA tensors. Checks closed forms of all_reduce,
broadcast, all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single (exact: small
integers in every dtype), then 3 DDP steps of a small model against a reference each rank
computes alone (every rank's gradient on this GPU, averaged; with 2 ranks the average is a sum
of two float32 values halved, exact and order-free, so parameters must match bit for bit).
Prints "torch_nccl: ok" and exits 0, else prints what differed and exits 1.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def closed_forms(rank, n, dev, fails):
    k = 1003
    j = torch.arange(k, device=dev)
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.float64):
        x = ((j % 13) + rank + 1).to(dt)
        want = (n * (j % 13) + n * (n + 1) // 2).to(dt)
        y = x.clone()
        dist.all_reduce(y)
        if not torch.equal(y, want):
            fails.append(f"all_reduce {dt}")
        b = x.clone()
        dist.broadcast(b, src=n - 1)
        if not torch.equal(b, ((j % 13) + n).to(dt)):
            fails.append(f"broadcast {dt}")
        g = torch.empty(n * k, dtype=dt, device=dev)
        dist.all_gather_into_tensor(g, x)
        want_g = torch.cat([((j % 13) + q + 1).to(dt) for q in range(n)])
        if not torch.equal(g, want_g):
            fails.append(f"all_gather_into_tensor {dt}")
        big = torch.cat([x] * n)
        rs = torch.empty(k, dtype=dt, device=dev)
        dist.reduce_scatter_tensor(rs, big)
        if not torch.equal(rs, want):
            fails.append(f"reduce_scatter_tensor {dt}")
        a2a = torch.empty(n * k, dtype=dt, device=dev)
        dist.all_to_all_single(a2a, big)
        if not torch.equal(a2a, want_g):
            fails.append(f"all_to_all_single {dt}")
    torch.cuda.synchronize()


def make_model(dev):
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(dev)


def batch(rank, step, dev):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(16, 32, generator=g).to(dev), torch.randn(16, 8, generator=g).to(dev)


def ddp_steps(rank, n, dev, fails, steps=3):
    model = make_model(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref = make_model(dev)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(rank, step, dev)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        grads = None
        for q in range(n):  # every rank's gradient, computed here, averaged as DDP does
            ref_opt.zero_grad()
            xq, yq = batch(q, step, dev)
            torch.nn.functional.mse_loss(ref(xq), yq).backward()
            gq = [p.grad.detach().clone() / n for p in ref.parameters()]
            grads = gq if grads is None else [a + b for a, b in zip(grads, gq)]
        for p, gsum in zip(ref.parameters(), grads):
            p.grad = gsum
        ref_opt.step()
    torch.cuda.synchronize()
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        if not torch.equal(p, r):
            fails.append(f"DDP parameter {name}: max |diff| {(p - r).abs().max().item():.3g}")


def worker(rank, n, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group("nccl", rank=rank, world_size=n)
    fails = []
    closed_forms(rank, n, dev, fails)
    if n == 2:
        ddp_steps(rank, n, dev, fails)
    dist.barrier()
    dist.destroy_process_group()
    out.put((rank, fails))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    assert torch.cuda.is_available(), "no CUDA device for PyTorch"
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL version seen by torch: "
          f"{torch.cuda.nccl.version()}")
    print("LD_PRELOAD=" + os.environ.get("LD_PRELOAD", ""))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=worker, args=(r, n, port, out)) for r in range(n)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        rank, fails = out.get(timeout=300)
        results[rank] = fails
    for p in procs:
        p.join(60)
    bad = False
    for rank in sorted(results):
        for f in results[rank]:
            print(f"rank {rank}: FAIL {f}")
            bad = True
    if len(results) != n or any(p.exitcode != 0 for p in procs):
        print(f"FAIL: exit codes {[p.exitcode for p in procs]}, {len(results)} of {n} ranks reported")
        bad = True
    print("torch_nccl: " + ("FAILED" if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
