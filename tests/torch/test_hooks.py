#!/usr/bin/python3
"""tutti_torch.hooks: DDP communication hooks on tutti's compressed all-reduce, 2 ranks.

1. Each hook on a bucket with known contents (a GradBucket stand-in that has the three methods
   the hooks call: index, buffer, gradients): the same bits on every rank, within the
   compressor's bound of the exact average (bf16, fp16, int8: tests/test_compress_e2e.cc's
   bounds), topk's error feedback loses nothing (after a flush the sums agree), PowerSGD
   recovers a rank-1 matrix and sends 1-D tensors exactly.
2. Each hook registered on a real DistributedDataParallel model: the parameters stay the same on
   both ranks, training moves them, the state counts the bytes it sent (fewer than an exact
   all-reduce's); a hook given a state of another kind is refused.
"""
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import tutti_torch  # noqa: F401 (registers the backend)
from tutti_torch import hooks

U = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


class Bucket:
    """What a hook reads from a c10d.GradBucket: its index, its flat buffer, its tensors."""

    def __init__(self, index, buffer, shapes):
        self._index, self._buffer, self._grads, off = index, buffer, [], 0
        for s in shapes:
            n = math.prod(s)
            self._grads.append(buffer[off:off + n].view(s))
            off += n
        assert off == buffer.numel()

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def gradients(self):
        return self._grads


def gather(t):
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return out


def same_on_every_rank(y, what):
    for r, other in enumerate(gather(y)):
        assert torch.equal(other, y), f"{what}: rank {r} got other bits"


def reduce_once(state, hook, x, shapes=None, index=0):
    buf = x.clone()
    return hook(state, Bucket(index, buf, shapes or [tuple(x.shape)])).wait()


def check_block_kinds(rank, R):
    # Inputs in [0.5, 2) with both signs: normal in fp16 and bf16 after the 1/R scaling.
    g = torch.Generator().manual_seed(11 + rank)
    n = 3000
    x = (torch.rand(n, generator=g) * 1.5 + 0.5) * (torch.randint(0, 2, (n,), generator=g) * 2 - 1)
    xs = torch.stack(gather(x)).double() / R  # x_r / R
    exact = xs.sum(0)
    S = xs.abs().sum(0)
    for spec, hook in (("bf16", hooks.bf16_hook), ("fp16", hooks.fp16_hook)):
        y = reduce_once(hooks.CompressionState(None, spec), hook, x)
        same_on_every_rank(y, spec)
        # two casts and an fp32 sum: |y - exact| < 2.1 u S (derivation: test_compress_e2e.cc)
        worst = ((y.double() - exact).abs() - 2.1 * U[spec] * S).max().item()
        assert worst <= 0, f"{spec}: outside its bound by {worst}"
    y = reduce_once(hooks.CompressionState(None, "int8"), hooks.int8_hook, x)
    same_on_every_rank(y, "int8")
    for lo in range(0, n, 256):  # |y - exact| < 2.01 R B / 254, B the block's max |x_r| / R
        B = xs[:, lo:lo + 256].abs().max().item()
        err = (y[lo:lo + 256].double() - exact[lo:lo + 256]).abs().max().item()
        assert err < 2.01 * R * B / 254, f"int8 block at {lo}: error {err} over {2.01 * R * B / 254}"
    print(f"rank {rank}: bf16, fp16, int8 hooks within their bounds, same bits on every rank",
          flush=True)


def check_topk(rank, R):
    # A 32 x 32 matrix, 1% of 1024: k = 11 pairs per call. After the gradient steps,
    # ceil(n / k) + 1 calls with a
    # zero gradient send every residual, so the sums of the results and of the exact averages
    # agree up to fp32 rounding: per step and element v = g / R + e (one rounding of 2^-24 |v|
    # per rank) and y = v_0 + v_1 (one more); positive gradients keep |v| <= max |y| (see
    # TopkFeedbackDelaysButLosesNothing in test_compress_e2e.cc): gap <= steps 3 2^-24 max|y|.
    n, k, steps = 1024, 11, 60
    flush = (n + k - 1) // k + 1
    state = hooks.CompressionState(None, "topk:0.01", warmup_steps=0)
    g = torch.Generator().manual_seed(5 + rank)
    got = torch.zeros(n, dtype=torch.float64)
    want = torch.zeros(n, dtype=torch.float64)
    top = 0.0
    for t in range(steps + flush):
        x = torch.rand(n, generator=g) + 0.01 if t < steps else torch.zeros(n)
        y = reduce_once(state, hooks.topk_hook, x, [(32, 32)])
        if t == 0:
            same_on_every_rank(y, "topk")
            assert (y != 0).sum().item() <= R * k, "topk: more than R k elements in the result"
        got += y.double()
        want += torch.stack(gather(x)).double().sum(0) / R
        top = max(top, y.abs().max().item())
    gap = (got - want).abs().max().item()
    bound = (steps + flush) * 3 * 2.0 ** -24 * top
    assert gap <= bound, f"topk: the sums differ by {gap} after the flush (bound {bound})"
    sent = state.bytes_sent()
    # a ring all-gather of (24-byte header + 8 k) per call: (R - 1) messages out
    assert sent == (steps + flush) * (R - 1) * (24 + 8 * k), f"topk: {sent} bytes sent"
    print(f"rank {rank}: topk hook: nothing lost after the flush (gap {gap:.3g} <= {bound:.3g})",
          flush=True)


def check_powersgd(rank, R):
    # Bucket: a 40 x 50 matrix, a 1-D tensor of 37, a 30 x 64 matrix. Matrices: u_r v^T with v
    # shared, so the average has rank 1; u in [1, 1.7) steps of 1/16, v = integer / 8: products,
    # halves and the sum of two halves are exact in fp32. Rank-1 PowerSGD recovers a rank-1
    # matrix up to (100 cols + rows + 8) 2^-24 |M|_F per element (derivation:
    # test_compress_layout.cc, Q's cancellation taken below 100); the 1-D tensor goes exactly.
    shapes = [(40, 50), (37,), (30, 64)]
    gu = torch.Generator().manual_seed(21 + rank)
    gv = torch.Generator().manual_seed(99)  # the same v on every rank
    parts = []
    for s in shapes:
        if len(s) == 1:
            parts.append(torch.randint(-64, 64, s, generator=gu).float() / 8)
        else:
            u = 1 + torch.randint(0, 12, (s[0],), generator=gu).float() / 16
            v = torch.randint(-6, 7, (s[1],), generator=gv).float() / 8
            parts.append(torch.outer(u, v).reshape(-1))
    x = torch.cat(parts)
    state = hooks.CompressionState(None, "powersgd:1", warmup_steps=0)
    y = reduce_once(state, hooks.powersgd_hook, x, shapes)
    same_on_every_rank(y, "powersgd")
    exact = torch.stack(gather(x)).sum(0) / R
    off = 0
    for s in shapes:
        n = math.prod(s)
        ys, es = y[off:off + n], exact[off:off + n]
        if len(s) == 1:
            assert torch.equal(ys, es), "powersgd: the 1-D tensor was not sent exactly"
        else:
            bound = (100 * s[1] + s[0] + 8) * 2.0 ** -24 * es.double().norm().item()
            err = (ys.double() - es.double()).abs().max().item()
            assert err <= bound, f"powersgd: matrix {s} off by {err} (bound {bound})"
        off += n
    print(f"rank {rank}: powersgd hook recovers rank-1 matrices, 1-D tensors exact", flush=True)


def check_ddp(rank, R):
    for spec, hook in (("bf16", hooks.bf16_hook), ("int8", hooks.int8_hook),
                       ("topk:0.05", hooks.topk_hook), ("powersgd:2", hooks.powersgd_hook)):
        torch.manual_seed(1)
        net = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
        before = [p.detach().clone() for p in net.parameters()]
        ddp = nn.parallel.DistributedDataParallel(net)
        state = hooks.CompressionState(None, spec, warmup_steps=2)
        ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(7 + rank)
        for _ in range(12):
            x = torch.randn(16, 1, 28, 28, generator=g)
            y = torch.randint(0, 10, (16,), generator=g)
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        moved = 0.0
        for p, p0 in zip(net.parameters(), before):
            same_on_every_rank(p.detach(), f"DDP {spec}: a parameter")
            moved = max(moved, (p.detach() - p0).abs().max().item())
        assert moved > 1e-3, f"DDP {spec}: training did not move the parameters"
        sent = state.bytes_sent()
        count = sum(p.numel() for p in net.parameters())
        exact_bytes = 12 * 2 * (R - 1) * 4 * count // R  # a ring all-reduce of fp32 per step
        assert 0 < sent < exact_bytes, f"DDP {spec}: {sent} bytes, exact would be {exact_bytes}"
        print(f"rank {rank}: DDP with {hook.__name__} ({spec}): parameters agree, moved {moved:.3g}, "
              f"{sent} bytes sent ({exact_bytes} exact)", flush=True)
    try:  # a hook given a state of another kind refuses before anything is sent
        reduce_once(hooks.CompressionState(None, "int8"), hooks.topk_hook, torch.ones(8))
    except RuntimeError as e:
        assert "made for \"int8\"" in str(e), f"unexpected error: {e}"
    else:
        raise AssertionError("topk_hook accepted an int8 state")


def main():
    torch.set_num_threads(1)
    dist.init_process_group("tutti")
    rank, R = dist.get_rank(), dist.get_world_size()
    assert R == 2, "the bounds here are written for 2 ranks"
    try:
        hooks.CompressionState(None, "int9")
    except RuntimeError as e:
        assert "int9" in str(e), str(e)
    else:
        raise AssertionError("a bad spec was accepted")
    check_block_kinds(rank, R)
    check_topk(rank, R)
    check_powersgd(rank, R)
    check_ddp(rank, R)
    print(f"rank {rank}: hooks passed", flush=True)


if __name__ == "__main__":
    main()
    sys.exit(0)
