#!/usr/bin/python3
"""Huge pages for repeatedly all-reduced heap tensors (bindings/torch/hugepages.cpp), 2+ ranks.

A buffer all-reduced once keeps its pages; the second all-reduce of the same buffer (address and
size, at least TUTTI_TORCH_HUGEPAGE_MIN_BYTES) collapses the 2 MiB ranges it touches into huge
pages: the module's counter moves and /proc/self/smaps shows AnonHugePages in the tensor's
mapping. Every result is exact (integers in fp32, far below 2^24), before and after the pages
change under the data. With TUTTI_TORCH_HUGEPAGES=0 (argument "off") nothing is collapsed.
"""
import ctypes
import mmap
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import tutti_torch

H = 2 << 20


def anon_huge_kb(addr):
    """AnonHugePages (kB) of the mapping that holds addr."""
    inside, kb = False, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "AnonHugePages:":
                kb += int(line.split()[1])
    return kb


def kernel_collapses():
    """Whether madvise(MADV_COLLAPSE) is known to this kernel (EINVAL: not built in)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    m = mmap.mmap(-1, 2 * H, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf = (ctypes.c_char * (2 * H)).from_buffer(m)
    base = (ctypes.addressof(buf) + H - 1) & ~(H - 1)
    rc = libc.madvise(base, H, 25)
    err = ctypes.get_errno()
    del buf
    m.close()
    return rc == 0 or err != 22


def main():
    off = len(sys.argv) > 1 and sys.argv[1] == "off"
    torch.set_num_threads(1)
    dist.init_process_group("tutti", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    n = (5 << 20) // 4 + 123  # 5 MiB and a bit: any 4 MiB holds a whole 2 MiB range
    base = torch.arange(n, dtype=torch.float32) % 1000
    t = base + rank
    want = base * world + world * (world - 1) // 2
    dist.all_reduce(t)
    assert torch.equal(t, want), f"rank {rank}: first all_reduce wrong"
    assert tutti_torch._hugepage_stats()["collapsed"] == 0, "a buffer met once was collapsed"
    small = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(small)  # below the minimum size: never collapsed
    assert tutti_torch._hugepage_stats() == {"collapsed": 0, "failed": 0}
    for k in range(3):
        t.copy_(base + rank + k)
        dist.all_reduce(t)
        assert torch.equal(t, want + world * k), f"rank {rank}: all_reduce {k + 2} wrong"
    stats = tutti_torch._hugepage_stats()
    if off:
        assert stats == {"collapsed": 0, "failed": 0}, f"rank {rank}: collapsed with =0: {stats}"
    elif kernel_collapses():
        # the tensor's 5 MiB hold at least one whole aligned 2 MiB range, inside its mapping
        assert stats["collapsed"] >= 1, f"rank {rank}: nothing collapsed: {stats}"
        kb = anon_huge_kb(t.data_ptr() + H)
        assert kb >= 2048, f"rank {rank}: no huge page in the tensor's mapping ({kb} kB): {stats}"
    else:
        print(f"rank {rank}: this kernel has no MADV_COLLAPSE; checked results only", flush=True)
    print(f"rank {rank}/{world}: ok, hugepages {stats}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
