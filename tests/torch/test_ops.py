#!/usr/bin/python3
"""Every c10d operation of backend "tutti" x dtypes, on this process's rank (launch.py starts
the ranks), checked element-wise against the closed form and against PyTorch's Gloo backend
on the same inputs (a Gloo group over the same ranks, created with new_group).

Inputs are small integers, chosen so every exact result is representable in every dtype:
  x_r[j] = j % 7 + r + 1 (r = rank): sums reach at most 4 * 6 + 10 = 34, exact in int8 and in
  the 8-bit significand of bfloat16; for PRODUCT x_r[j] = 1 + (j + r) % 2, so |product| <= 16.
Sum, product, min, max are then exact in every dtype whatever the order of the arithmetic:
compared with ==. AVG (floating types only) is S / n of an exact S: a correct implementation
rounds at most n + 1 times (n pre-scaled terms or one sum, then one division) each within
eps/2 relatively, so |error| <= (n + 1) * eps / 2 * |S / n|; the check uses that bound.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import tutti_torch  # noqa: F401  (registers backend "tutti")

DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
SIZES = [0, 1, 7, 1000, 70000]  # 70000 x 4-8 bytes crosses the shared-memory staging size
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}

rank, world = 0, 1
gloo = None
checks = {"closed": 0, "gloo": 0, "gloo_refused": 0}


def data(n, r, dtype, op="sum"):
    j = torch.arange(n, dtype=torch.int64)
    x = 1 + (j + r) % 2 if op == "product" else j % 7 + r + 1
    return x.to(dtype)


def expect(n, dtype, op):
    xs = torch.stack([data(n, r, torch.float64, op) for r in range(world)])
    if op == "sum":
        return xs.sum(0)
    if op == "product":
        return xs.prod(0)
    if op == "min":
        return xs.min(0).values
    if op == "max":
        return xs.max(0).values
    return xs.sum(0) / world


def same(got, want, what, tol=0.0):
    got64 = got.to(torch.float64)
    want64 = want.to(torch.float64)
    err = (got64 - want64).abs()
    if got.shape != want.shape or (err.numel() and err.max().item() > tol):
        i = int(err.argmax()) if err.numel() else -1
        raise AssertionError(f"rank {rank}: {what}: element {i}: got {got.flatten()[:8].tolist()}"
                             f" want {want.flatten()[:8].tolist()} (max |diff| "
                             f"{err.max().item() if err.numel() else 'shape'} > {tol})")
    checks["closed"] += 1


def vs_gloo(fn, tutti_out, what):
    """Runs fn(group=gloo) and compares its output with tutti's, bit for bit."""
    try:
        gout = fn(gloo)
    except RuntimeError as e:  # dtype/op Gloo does not implement: the closed form still checks
        checks["gloo_refused"] += 1
        return
    if not torch.equal(gout.to(torch.float64), tutti_out.to(torch.float64)):
        raise AssertionError(f"rank {rank}: {what}: tutti and gloo differ")
    checks["gloo"] += 1


def avg_tol(want, dtype):
    eps = torch.finfo(dtype).eps
    return (world + 1) * eps / 2 * float(want.abs().max()) if want.numel() else 0.0


def check_allreduce(n, dtype, opname):
    op = OPS[opname]
    t = data(n, rank, dtype, opname)
    dist.all_reduce(t, op=op)
    want = expect(n, dtype, opname)
    same(t, want, f"all_reduce {opname} {dtype} n={n}", avg_tol(want, dtype) if opname == "avg" else 0.0)

    def g(group):
        x = data(n, rank, dtype, opname)
        dist.all_reduce(x, op=op, group=group)
        return x
    if opname != "avg":
        vs_gloo(g, t, f"all_reduce {opname} {dtype} n={n}")


def check_collectives(n, dtype):
    w = world
    # broadcast from every root
    for root in range(w):
        t = data(n, rank, dtype)
        dist.broadcast(t, src=root)
        same(t, data(n, root, dtype), f"broadcast root {root} {dtype} n={n}")
    # reduce to the last rank
    root = w - 1
    t = data(n, rank, dtype)
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
    if rank == root:
        same(t, expect(n, dtype, "sum"), f"reduce {dtype} n={n}")
    # all_gather (list) and _all_gather_base
    outs = [torch.empty(n, dtype=dtype) for _ in range(w)]
    dist.all_gather(outs, data(n, rank, dtype))
    for r in range(w):
        same(outs[r], data(n, r, dtype), f"all_gather from {r} {dtype} n={n}")
    flat = torch.empty(n * w, dtype=dtype)
    dist._all_gather_base(flat, data(n, rank, dtype))
    same(flat, torch.cat([data(n, r, dtype) for r in range(w)]), f"_all_gather_base {dtype} n={n}")

    def g(group):
        o = torch.empty(n * w, dtype=dtype)
        dist._all_gather_base(o, data(n, rank, dtype), group=group)
        return o
    vs_gloo(g, flat, f"_all_gather_base {dtype}")
    # reduce_scatter (list) and _reduce_scatter_base: rank r gets block r of the sums
    full = expect(n * w, dtype, "sum")
    out = torch.empty(n, dtype=dtype)
    dist.reduce_scatter(out, list(data(n * w, rank, dtype).chunk(w)) if n else
                        [torch.empty(0, dtype=dtype)] * w)
    same(out, full[rank * n:(rank + 1) * n], f"reduce_scatter {dtype} n={n}")
    out2 = torch.empty(n, dtype=dtype)
    dist._reduce_scatter_base(out2, data(n * w, rank, dtype))
    same(out2, full[rank * n:(rank + 1) * n], f"_reduce_scatter_base {dtype} n={n}")
    # gather and scatter at root 0
    gl = [torch.empty(n, dtype=dtype) for _ in range(w)] if rank == 0 else None
    dist.gather(data(n, rank, dtype), gather_list=gl, dst=0)
    if rank == 0:
        for r in range(w):
            same(gl[r], data(n, r, dtype), f"gather from {r} {dtype} n={n}")
    sl = [data(n, 10 + r, dtype) for r in range(w)] if rank == 0 else None
    out = torch.empty(n, dtype=dtype)
    dist.scatter(out, scatter_list=sl, src=0)
    same(out, data(n, 10 + rank, dtype), f"scatter {dtype} n={n}")


def check_alltoall(dtype):
    w = world
    # equal splits: block p of rank r's input (value 10 r + p <= 33, exact in every dtype)
    # goes to rank p
    inp = torch.cat([torch.full((3,), 10 * rank + p, dtype=torch.int64) for p in range(w)]).to(dtype)
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.full((3,), 10 * r + rank, dtype=torch.int64) for r in range(w)])
    same(out, want, f"all_to_all_single {dtype}")
    # uneven splits of rows of 2: rank r sends r + p + 1 rows to p
    ins = [r_p + rank + 1 for r_p in range(w)]
    outs = [rank + r + 1 for r in range(w)]
    inp = torch.cat([torch.full((ins[p], 2), 10 * rank + p, dtype=torch.int64) for p in range(w)]).to(dtype)
    out = torch.empty((sum(outs), 2), dtype=dtype)
    dist.all_to_all_single(out, inp, output_split_sizes=outs, input_split_sizes=ins)
    want = torch.cat([torch.full((outs[r], 2), 10 * r + rank, dtype=torch.int64) for r in range(w)])
    same(out, want, f"all_to_all_single splits {dtype}")
    # list form
    outl = [torch.empty(2, dtype=dtype) for _ in range(w)]
    dist.all_to_all(outl, [torch.full((2,), 10 * rank + p, dtype=torch.int64).to(dtype) for p in range(w)])
    for r in range(w):
        same(outl[r], torch.full((2,), 10 * r + rank), f"all_to_all from {r} {dtype}")


def check_coalesced_p2p_async():
    w = world
    ts = [data(5, rank, torch.float32), data(300000, rank, torch.float32)]
    dist.all_reduce_coalesced(ts)
    same(ts[0], expect(5, torch.float32, "sum"), "all_reduce_coalesced[0]")
    same(ts[1], expect(300000, torch.float32, "sum"), "all_reduce_coalesced[1]")
    outs = [[torch.empty(3), torch.empty(4)] for _ in range(w)]
    dist.all_gather_coalesced(outs, [data(3, rank, torch.float32), data(4, rank, torch.float32)])
    for r in range(w):
        same(outs[r][0], data(3, r, torch.float32), "all_gather_coalesced[0]")
        same(outs[r][1], data(4, r, torch.float32), "all_gather_coalesced[1]")
    # send/recv around a ring: even ranks send first, odd ranks receive first
    if w > 1:
        nxt, prv = (rank + 1) % w, (rank - 1) % w
        got = torch.empty(1000, dtype=torch.int64)
        if rank % 2 == 0:
            dist.send(data(1000, rank, torch.int64), nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(data(1000, rank, torch.int64), nxt)
        same(got, data(1000, prv, torch.int64), "send/recv ring")
    # asynchronous work completes in the background, in order
    works = [dist.all_reduce(t, async_op=True) for t in
             [data(100000, rank, torch.float32) for _ in range(4)]]
    for wk in works:
        wk.wait()
        assert wk.is_completed()
        fut = wk.get_future()
        same(fut.value()[0], expect(100000, torch.float32, "sum"), "async all_reduce future")
    # a collective that finds the group idle runs on the calling thread (TUTTI_TORCH_INLINE_BYTES,
    # default 16 MiB; 0 sends every call to the worker): its work is complete when it returns
    small = data(1000, rank, torch.float32)
    wk = dist.all_reduce(small, async_op=True)
    inline_max = int(os.environ.get("TUTTI_TORCH_INLINE_BYTES", 16 << 20))
    if small.numel() * small.element_size() <= inline_max:
        assert wk.is_completed(), f"rank {rank}: an all_reduce on an idle group did not run inline"
    wk.wait()
    same(small, expect(1000, torch.float32, "sum"), "all_reduce on the calling thread")
    # behind a queued point-to-point call a collective is queued too, and runs after it
    if w > 1:
        peer = rank ^ 1 if (rank ^ 1) < w else rank
        got = torch.empty(1000, dtype=torch.int64)
        p2p = [dist.isend(data(1000, rank, torch.int64), peer) if rank % 2 == 0 else
               dist.irecv(got, peer)] if peer != rank else []
        after = data(1000, rank, torch.float32)
        wk = dist.all_reduce(after, async_op=True)
        for p in p2p:
            p.wait()
        wk.wait()
        same(after, expect(1000, torch.float32, "sum"), "all_reduce queued behind isend/irecv")
        if peer != rank and rank % 2 == 1:
            same(got, data(1000, peer, torch.int64), "irecv before a queued all_reduce")
    # non-contiguous tensor
    m = data(12, rank, torch.float32).view(3, 4).t()
    dist.all_reduce(m)
    same(m, expect(12, torch.float32, "sum").view(3, 4).t(), "all_reduce non-contiguous")
    # bool reduces as logical or / and
    b = torch.tensor([rank == 0, True, False])
    dist.all_reduce(b)
    same(b, torch.tensor([True, True, False]), "all_reduce bool")


def check_errors():
    quantized = torch.quantize_per_tensor(torch.zeros(2), 0.1, 0, torch.qint8)
    for bad, what in [(lambda: dist.all_reduce(quantized), "dtype"),
                      (lambda: dist.all_reduce(torch.zeros(2), op=dist.ReduceOp.BAND), "op"),
                      (lambda: dist.broadcast(torch.zeros(2), src=world + 3), "root")]:
        try:
            bad()
        except (RuntimeError, ValueError) as e:
            assert "rank" in str(e) or what == "root", f"rank {rank}: error names no rank: {e}"
            continue
        raise AssertionError(f"rank {rank}: bad {what} was accepted")
    # the group still works after rejected calls
    t = data(4, rank, torch.float32)
    dist.all_reduce(t)
    same(t, expect(4, torch.float32, "sum"), "all_reduce after errors")


def check_subgroup():
    if world < 2:
        return
    members = list(range(world - 1, -1, -2))  # every other rank, from the last
    sub = dist.new_group(members)
    if rank in members:
        t = torch.full((10,), float(rank))
        dist.all_reduce(t, group=sub)
        same(t, torch.full((10,), float(sum(members))), "subgroup all_reduce")
        assert dist.get_backend(sub) == "tutti"


def main():
    global rank, world, gloo
    torch.set_num_threads(1)
    dist.init_process_group("tutti", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    for n in SIZES:
        for dtype in DTYPES:
            for opname in OPS:
                if opname == "avg" and not dtype.is_floating_point:
                    continue
                check_allreduce(n, dtype, opname)
            check_collectives(n, dtype)
    for dtype in DTYPES:
        check_alltoall(dtype)
    check_coalesced_p2p_async()
    check_errors()
    check_subgroup()
    dist.barrier()
    print(f"rank {rank}/{world}: ok, {checks['closed']} closed-form checks, {checks['gloo']} "
          f"equal to gloo, {checks['gloo_refused']} dtype/op combinations gloo refuses", flush=True)
    assert checks["gloo"] > 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
