#!/usr/bin/python3
"""Random soak of backend "tutti" (launch.py starts the ranks): the same seeded draws on every
rank pick a c10d operation (all_reduce, all_gather, _allgather_base, reduce_scatter_tensor,
all_to_all_single with even or uneven splits, broadcast, reduce, isend/irecv between a random
pair, batch_isend_irecv), a dtype, a size (0 to 2**20 elements, drawn log-uniformly) and a
root, and issue it with async_op=True while up to 5 earlier operations are still outstanding;
the outstanding works are waited for in a drawn order, so small operations that would run on
the caller's thread meet large ones queued for the worker thread. Every result is checked
against its closed form with ==: inputs are (3 j + 7 r + step) % 31, so a sum over 4 ranks
stays below 128, exact in every dtype used.

    /usr/bin/python3 tests/torch/launch.py -n 2 tests/torch/test_soak.py [steps] [seed]
"""
import random
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import tutti_torch  # noqa: F401  (registers backend "tutti")

DTYPES = [torch.int32, torch.int64, torch.float32, torch.bfloat16, torch.float16, torch.uint8]
KINDS = ["all_reduce", "all_gather", "allgather_base", "reduce_scatter", "alltoall",
         "alltoall_uneven", "broadcast", "reduce", "p2p", "batch_p2p"]
OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def data(n, r, step, dtype):
    j = torch.arange(n, dtype=torch.int64)
    return ((3 * j + 7 * r + step) % 31).to(dtype)


def reduced(n, world, step, dtype, op):
    xs = torch.stack([data(n, r, step, torch.int64) for r in range(world)])
    out = xs.sum(0) if op == "sum" else xs.max(0).values if op == "max" else xs.min(0).values
    return out.to(dtype)


class Pending:
    """One outstanding operation: its work and what to check once it is done."""

    def __init__(self, what, work, checks):
        self.what, self.work, self.checks = what, work, checks

    def finish(self, rank):
        works = self.work if isinstance(self.work, list) else [self.work]
        for w in works:
            try:
                if w is not None:
                    w.wait()
            except RuntimeError as e:
                raise RuntimeError(f"rank {rank}: {self.what}: {e}") from e
        for got, want in self.checks:
            if not torch.equal(got, want):
                bad = (got.to(torch.float64) != want.to(torch.float64)).nonzero()
                i = int(bad[0][0]) if bad.numel() else -1
                raise AssertionError(f"rank {rank}: {self.what}: element {i} of {got.numel()}: "
                                     f"got {got.flatten()[i].item() if i >= 0 else '?'}, want "
                                     f"{want.flatten()[i].item() if i >= 0 else '?'}")


def issue(rng, step, rank, world):
    kind = rng.choice(KINDS)
    dtype = rng.choice(DTYPES)
    bits = rng.randrange(21)
    n = 0 if bits == 0 else rng.randrange(1 << bits)
    root = rng.randrange(world)
    opname = rng.choice(list(OPS))
    what = f"step {step}: {kind} {dtype} n={n} root={root} op={opname}"
    if kind == "all_reduce":
        t = data(n, rank, step, dtype)
        w = dist.all_reduce(t, op=OPS[opname], async_op=True)
        return Pending(what, w, [(t, reduced(n, world, step, dtype, opname))])
    if kind in ("all_gather", "allgather_base"):
        t = data(n, rank, step, dtype)
        want = [data(n, r, step, dtype) for r in range(world)]
        if kind == "all_gather":
            outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
            w = dist.all_gather(outs, t, async_op=True)
            return Pending(what, w, list(zip(outs, want)))
        out = torch.empty(n * world, dtype=dtype)
        w = dist._all_gather_base(out, t, async_op=True)
        return Pending(what, w, [(out, torch.cat(want))])
    if kind == "reduce_scatter":
        t = data(n * world, rank, step, dtype)
        out = torch.empty(n, dtype=dtype)
        w = dist.reduce_scatter_tensor(out, t, op=OPS[opname], async_op=True)
        full = reduced(n * world, world, step, dtype, opname)
        return Pending(what, w, [(out, full[rank * n:(rank + 1) * n])])
    if kind == "alltoall":
        t = data(n * world, rank, step, dtype)
        out = torch.empty(n * world, dtype=dtype)
        w = dist.all_to_all_single(out, t, async_op=True)
        want = torch.cat([data(n * world, r, step, dtype)[rank * n:(rank + 1) * n]
                          for r in range(world)])
        return Pending(what, w, [(out, want)])
    if kind == "alltoall_uneven":
        # rank s sends (s + d + step) % 3 * m elements to rank d, m drawn alike on every rank
        m = 0 if bits == 0 else rng.randrange(1 << min(bits, 16))
        split = [[(s + d + step) % 3 * m for d in range(world)] for s in range(world)]
        t = data(sum(split[rank]), rank, step, dtype)
        out = torch.empty(sum(split[s][rank] for s in range(world)), dtype=dtype)
        w = dist.all_to_all_single(out, t, output_split_sizes=[split[s][rank] for s in range(world)],
                                   input_split_sizes=split[rank], async_op=True)
        want = []
        for s in range(world):
            start = sum(split[s][:rank])
            want.append(data(sum(split[s]), s, step, dtype)[start:start + split[s][rank]])
        return Pending(what, w, [(out, torch.cat(want) if want else out)])
    if kind == "broadcast":
        t = data(n, rank, step, dtype) if rank == root else torch.zeros(n, dtype=dtype)
        w = dist.broadcast(t, src=root, async_op=True)
        return Pending(what, w, [(t, data(n, root, step, dtype))])
    if kind == "reduce":
        t = data(n, rank, step, dtype)
        w = dist.reduce(t, dst=root, op=OPS[opname], async_op=True)
        return Pending(what, w, [(t, reduced(n, world, step, dtype, opname))] if rank == root
                       else [])
    # point-to-point between a pair drawn alike on every rank (a rank may be both ends: no
    # call then); the others take part in nothing
    src, dst = rng.randrange(world), rng.randrange(world)
    if src == dst:
        return Pending(what + " (same rank: nothing)", None, [])
    what += f" {src}->{dst}"
    if kind == "p2p":
        if rank == src:
            return Pending(what, dist.isend(data(n, src, step, dtype), dst), [])
        if rank == dst:
            t = torch.zeros(n, dtype=dtype)
            return Pending(what, dist.irecv(t, src), [(t, data(n, src, step, dtype))])
        return Pending(what, None, [])
    # batch: two messages each way, the lower rank sending first (PyTorch 1.13 groups the batch
    # for NCCL only, and a send here blocks until its peer receives: docs/torch.md, Limits)
    if rank not in (src, dst):
        return Pending(what, None, [])
    peer = dst if rank == src else src
    recvs = [torch.zeros(n, dtype=dtype), torch.zeros(n // 2, dtype=dtype)]
    sends = [dist.P2POp(dist.isend, data(n, rank, step, dtype), peer),
             dist.P2POp(dist.isend, data(n // 2, rank, step + 1, dtype), peer)]
    gets = [dist.P2POp(dist.irecv, recvs[0], peer), dist.P2POp(dist.irecv, recvs[1], peer)]
    works = dist.batch_isend_irecv(sends + gets if rank < peer else gets + sends)
    return Pending(what, works, [(recvs[0], data(n, peer, step, dtype)),
                                 (recvs[1], data(n // 2, peer, step + 1, dtype))])


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 20261208
    torch.set_num_threads(1)
    dist.init_process_group("tutti", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    rng = random.Random(seed)
    pending = []
    for step in range(steps):
        pending.append(issue(rng, step, rank, world))
        while len(pending) > rng.randrange(6):  # 0-5 left outstanding, waited in a drawn order
            pending.pop(rng.randrange(len(pending))).finish(rank)
    while pending:
        pending.pop(0).finish(rank)
    dist.barrier()
    print(f"rank {rank}/{world}: ok, {steps} random operations exact", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
