#!/usr/bin/python3
"""gloo_bench.py: the PyTorch/Gloo peer of the tutti benchmarks.

PyTorch 1.13's Gloo backend (torch.distributed's ProcessGroupGloo, what DDP uses on CPUs)
measured like the tutti perf programs: the same flags, sizes, iteration counts, warm-up,
timing, -a aggregation, columns and JSON, on fp32 data.

    /usr/bin/python3 perf/gloo_bench.py -N 2 --coll all_reduce -b 8 -e 256M -f 2 -c 1

-N n starts n local ranks (rendezvous on 127.0.0.1, a free port); under torchrun (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) the process is one rank. Use Debian's
/usr/bin/python3, the interpreter python3-torch is installed for.

Setup: one Gloo device on the loopback interface (Gloo's transport is TCP: it has no shared
memory), one Gloo worker thread (--gloo-threads) and one intra-op thread per rank
(torch.set_num_threads(1)); calls go to the process group object directly (pg.allreduce(...)
.wait()), which is what torch.distributed.all_reduce does minus its argument checks.

Collectives (--coll) and how the two columns are made. PyTorch's API has one form of each
call; the other column times the same call plus the one tensor copy a program needs to get
the other form (marked "copy +"):

    all_reduce   out: copy + allreduce(recv)          in: allreduce(recv)
    all_gather   out: allgather(views of recv, send)  in: allgather(views, own view of recv)
    broadcast    out: copy at root + broadcast(recv)  in: broadcast(recv)
    reduce       out: copy + reduce(recv)             in: reduce(recv)
    alltoall     out: alltoall_base(recv, send)       in: copy + alltoall_base(recv, copy)
    gather       out: gather(views, send)             in: gather(views, own view)
    scatter      out: scatter(recv block, views of send)  in: scatter(own view, views of recv)
    sendrecv     out: send(send) + recv(recv)         in: the same buffer both ways (N/A)
    reduce_scatter  ProcessGroupGloo has none in PyTorch 1.13: the program says so, exits 0.

Data and checks as in mpi_perf.c: element k of block b of rank r's input is
(k + b(n+1) + r) % 31 + 1, exact in fp32; -c compares every element of the output (Gloo uses
non-root buffers of a reduce as scratch, so only the root's is checked there).
"""
import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time

MOD = 31
MIN_SCALED_ITERS = 3
EXIT_TIMEOUT = 124
COLLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
         "gather", "scatter", "sendrecv")
REDUCING = ("all_reduce", "reduce", "reduce_scatter")
ROOTED = ("broadcast", "reduce", "gather", "scatter")


# ---- options, sizes, output: the same as bench.c ----

def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = s.rstrip("bB")
    try:
        if t and t[-1].upper() in mult:
            return int(t[:-1]) * mult[t[-1].upper()]
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size '{s}'")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gloo_bench.py", description=__doc__.split("\n")[1])
    p.add_argument("-b", "--minbytes", type=parse_bytes, default=32 << 20)
    p.add_argument("-e", "--maxbytes", type=parse_bytes, default=32 << 20)
    p.add_argument("-i", "--stepbytes", type=parse_bytes, default=1 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=1)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-m", "--agg_iters", type=int, default=1)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("-o", "--op", default="sum")
    p.add_argument("-d", "--datatype", default="float")
    p.add_argument("-r", "--root", default="0")
    p.add_argument("-a", "--average", type=int, default=1, choices=(0, 1, 2, 3))
    p.add_argument("-T", "--timeout", type=int, default=0)
    p.add_argument("-J", "--json", default=None)
    p.add_argument("-t", "--nthreads", type=int, default=1)
    p.add_argument("-g", "--ngpus", type=int, default=1)
    p.add_argument("-z", "--blocking", type=int, default=0)
    p.add_argument("--iter-bytes", type=parse_bytes, default=0)
    p.add_argument("--coll", choices=COLLS, required=True)
    p.add_argument("-N", "--nranks", type=int, default=2, help="local ranks to start")
    p.add_argument("--gloo-threads", type=int, default=1)
    a = p.parse_args(argv)
    if a.nthreads != 1 or a.ngpus != 1:
        p.error("-t and -g: only 1 (one rank per process)")
    if a.datatype != "float":
        p.error("only -d float is measured")
    if a.coll in REDUCING and a.op != "sum":
        p.error("only -o sum is measured")
    if a.minbytes > a.maxbytes:
        p.error("minbytes is larger than maxbytes")
    return a


def sizes(a):
    s = a.minbytes
    while s <= a.maxbytes:
        yield s
        nxt = s * a.stepfactor if a.stepfactor > 1 else s + a.stepbytes
        if nxt <= s:
            return
        s = nxt


def iters_for(a, nbytes):
    if a.iter_bytes == 0 or nbytes == 0:
        return a.iters
    return min(a.iters, max(MIN_SCALED_ITERS, a.iter_bytes // nbytes))


def fmt_time(us):
    if us < 1:
        return f"{us:7.3f}"
    return f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def fmt_half(r):
    wrong = "N/A" if r["wrong"] is None else f"{r['wrong']:g}"
    return f"  {fmt_time(r['time_us'])}  {r['algbw']:6.2f}  {r['busbw']:6.2f}  {wrong:>5}"


def print_header(a, nranks, pids, host):
    step = f"{a.stepfactor}(factor)" if a.stepfactor > 1 else f"{a.stepbytes}(bytes)"
    print(f"# nThread 1 nGpus 1 minBytes {a.minbytes} maxBytes {a.maxbytes} step: {step} "
          f"warmup iters: {a.warmup_iters} iters: {a.iters} agg iters: {a.agg_iters} "
          f"validation: {a.check} graph: 0")
    if a.iter_bytes:
        print(f"# iterations per size: min({a.iters}, max({MIN_SCALED_ITERS}, "
              f"{a.iter_bytes} / size))")
    names = ["rank0", "mean", "min", "max"]
    print(f"# time across ranks: {names[a.average]} (-a {a.average})")
    print("#\n# Using devices")
    for r in range(nranks):
        print(f"#  Rank {r:2d} Group  0 Pid {pids[r]:6d} on {host:>10s} device  0 [host]")
    print("#")
    print("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
          % ("", "", "", "", ""))
    print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
          % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
             "time", "algbw", "busbw", "#wrong"))
    print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
          % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
             "(GB/s)", "(GB/s)", ""))
    sys.stdout.flush()


# ---- launching ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(a, argv):
    """Starts a.nranks copies of this script as ranks; returns the first failing status."""
    env = dict(os.environ, WORLD_SIZE=str(a.nranks), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv,
                              env=dict(env, RANK=str(r))) for r in range(a.nranks)]
    status = 0
    pending = set(procs)
    while pending:
        for p in list(pending):
            rc = p.poll()
            if rc is None:
                continue
            pending.discard(p)
            if rc != 0 and status == 0:
                status = rc
                for q in pending:
                    q.kill()
        time.sleep(0.05)
    return status


# ---- one rank ----

class Rank:
    def __init__(self, a):
        import torch
        import torch.distributed as dist
        self.torch, self.dist, self.a = torch, dist, a
        torch.set_num_threads(1)
        self.rank = int(os.environ["RANK"])
        self.n = int(os.environ["WORLD_SIZE"])
        port = int(os.environ["MASTER_PORT"])
        if "TORCHELASTIC_RUN_ID" in os.environ:
            port += 1  # torchrun's own store owns MASTER_PORT
        timeout = datetime.timedelta(seconds=a.timeout if a.timeout > 0 else 1800)
        store = dist.TCPStore(os.environ["MASTER_ADDR"], port, self.n, self.rank == 0,
                              timeout=timeout)
        opts = dist.ProcessGroupGloo._Options()
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        opts._threads = a.gloo_threads
        opts._timeout = timeout
        self.pg = dist.ProcessGroupGloo(store, self.rank, self.n, opts)
        self.coll = a.coll
        self.root = 0
        self.what = "init"

    # -- data --
    def values(self, r, block, first, count):
        t = self.torch.arange(first, first + count, dtype=self.torch.int64)
        return ((t + block * (self.n + 1) + r) % MOD + 1).to(self.torch.float32)

    def blocks(self, rank_of, block_of, total, bc):
        """A buffer of total elements in blocks of bc: block j = block block_of(j) of rank
        rank_of(j) (rank None: the sum over ranks)."""
        out = self.torch.empty(total, dtype=self.torch.float32)
        for j in range(total // bc if bc else 0):
            r, b = rank_of(j), block_of(j)
            if r is None:
                v = sum(self.values(q, b, 0, bc) for q in range(self.n))
            else:
                v = self.values(r, b, 0, bc)
            out[j * bc:(j + 1) * bc] = v
        return out

    # -- sizes (nccl-tests' meaning, as the tutti programs) --
    def set_size(self, nbytes):
        count, n = nbytes // 4, self.n
        if self.coll in ("all_reduce", "broadcast", "reduce", "sendrecv"):
            self.block, self.send_count, self.recv_count, self.bw_count = count, count, count, count
        elif self.coll in ("all_gather", "gather"):
            b = count // n
            self.block, self.send_count, self.recv_count, self.bw_count = b, b, b * n, b * n
        elif self.coll == "scatter":
            b = count // n
            self.block, self.send_count, self.recv_count, self.bw_count = b, b * n, b, b * n
        else:  # alltoall
            b = count // n
            self.block, self.send_count, self.recv_count, self.bw_count = b, b * n, b * n, b * n
        self.size_bytes = max(self.send_count, self.recv_count) * 4

    def bus_factor(self):
        n = self.n
        if self.coll == "all_reduce":
            return 2.0 * (n - 1) / n
        if self.coll in ("all_gather", "alltoall", "gather", "scatter"):
            return (n - 1) / n
        return 1.0

    def input(self):
        r, n, b = self.rank, self.n, self.block
        if self.coll in ("alltoall",):
            return self.blocks(lambda j: r, lambda j: j, b * n, b)
        if self.coll == "scatter":
            return self.blocks(lambda j: self.root, lambda j: j, b * n, b)
        return self.values(r, 0, 0, self.send_count)

    def expected(self):
        """The expected output, or None where nothing is checked."""
        r, n, b = self.rank, self.n, self.block
        c = self.coll
        if c == "all_reduce":
            return self.blocks(lambda j: None, lambda j: 0, b, b)
        if c == "reduce":
            return self.blocks(lambda j: None, lambda j: 0, b, b) if r == self.root else None
        if c == "broadcast":
            return self.values(self.root, 0, 0, b)
        if c == "all_gather" or (c == "gather" and r == self.root):
            return self.blocks(lambda j: j, lambda j: 0, b * n, b)
        if c == "gather":
            return None
        if c == "alltoall":
            return self.blocks(lambda j: j, lambda j: r, b * n, b)
        if c == "scatter":
            return self.values(self.root, r, 0, b)
        return self.values((r + n - 1) % n, 0, 0, b)  # sendrecv

    # -- the calls --
    def call(self, send, recv, in_place):
        d, pg, c, n, b = self.dist, self.pg, self.coll, self.n, self.block
        if b == 0:
            return  # nothing to move (as nccl-tests skips count 0)
        if c == "all_reduce":
            if not in_place:
                recv[:b].copy_(send[:b])
            pg.allreduce([recv[:b]]).wait()
        elif c == "all_gather":
            outs = list(recv[:b * n].split(b)) if b else [recv[:0]] * n
            pg.allgather([outs], [outs[self.rank] if in_place else send[:b]]).wait()
        elif c == "broadcast":
            o = d.BroadcastOptions()
            o.rootRank = self.root
            if not in_place and self.rank == self.root:
                recv[:b].copy_(send[:b])
            pg.broadcast([recv[:b]], o).wait()
        elif c == "reduce":
            o = d.ReduceOptions()
            o.rootRank = self.root
            if not in_place:
                recv[:b].copy_(send[:b])
            pg.reduce([recv[:b]], o).wait()
        elif c == "alltoall":
            src = recv[:b * n].clone() if in_place else send[:b * n]
            pg.alltoall_base(recv[:b * n], src, [], [], d.AllToAllOptions()).wait()
        elif c == "gather":
            o = d.GatherOptions()
            o.rootRank = self.root
            outs = list(recv[:b * n].split(b)) if b else [recv[:0]] * n
            mine = outs[self.rank] if in_place else send[:b]
            pg.gather([outs] if self.rank == self.root else [], [mine], o).wait()
        elif c == "scatter":
            o = d.ScatterOptions()
            o.rootRank = self.root
            src = recv if in_place else send
            ins = list(src[:b * n].split(b)) if b else [src[:0]] * n
            out = recv[self.rank * b:(self.rank + 1) * b] if in_place else recv[:b]
            pg.scatter([out], [ins] if self.rank == self.root else [], o).wait()
        else:  # sendrecv
            to, frm = (self.rank + 1) % n, (self.rank + n - 1) % n
            ws = pg.send([recv[:b] if in_place else send[:b]], to, 0)
            wr = pg.recv([recv[:b]], frm, 0)
            ws.wait()
            wr.wait()

    def output(self, recv, in_place):
        if self.coll == "scatter" and in_place:
            return recv[self.rank * self.block:(self.rank + 1) * self.block]
        return recv[:self.recv_count]

    def input_view(self, send, recv, in_place):
        """Where the call reads this rank's input."""
        if not in_place:
            return send[:self.send_count]
        if self.coll in ("all_gather", "gather"):
            return recv[self.rank * self.block:(self.rank + 1) * self.block]
        return recv[:self.send_count]

    def run(self, send, recv, in_place, iters):
        for _ in range(iters):
            for _ in range(self.a.agg_iters):
                self.call(send, recv, in_place)

    def reduce_scalar(self, values, op):
        t = self.torch.tensor(values, dtype=self.torch.float64)
        o = self.dist.AllreduceOptions()
        o.reduceOp = op
        self.pg.allreduce([t], o).wait()
        return t.tolist()

    def prepare(self, send, recv, in_place):
        recv.fill_(float("nan"))
        if self.coll in ("broadcast", "scatter") and self.rank != self.root:
            return
        self.input_view(send, recv, in_place).copy_(self.input())

    def measure(self, send, recv, in_place):
        a = self.a
        iters = iters_for(a, self.size_bytes)
        if a.check:
            self.prepare(send, recv, in_place)
        self.pg.barrier().wait()
        t0 = time.perf_counter()
        self.run(send, recv, in_place, iters)
        seconds = (time.perf_counter() - t0) / (iters * a.agg_iters)
        wrong = None
        if a.check and not (in_place and self.coll == "sendrecv"):
            wrong = 0
            for _ in range(a.check):
                self.prepare(send, recv, in_place)
                self.call(send, recv, in_place)
                want = self.expected()
                if want is not None:
                    wrong += int((self.output(recv, in_place) != want).sum())
                if wrong:
                    break
        SUM, MIN, MAX = self.dist.ReduceOp.SUM, self.dist.ReduceOp.MIN, self.dist.ReduceOp.MAX
        s = self.reduce_scalar([seconds, wrong or 0, seconds if self.rank == 0 else 0], SUM)
        if a.average in (2, 3):
            seconds = self.reduce_scalar([seconds], MIN if a.average == 2 else MAX)[0]
        else:
            seconds = s[2] if a.average == 0 else s[0] / self.n
        if wrong is not None:
            wrong = int(s[1])
        algbw = self.bw_count * 4 / seconds / 1e9 if seconds > 0 else 0.0
        return {"time_us": seconds * 1e6, "algbw": algbw, "busbw": algbw * self.bus_factor(),
                "wrong": wrong}


def json_header(a, r, pids, host, version):
    return {"tool": f"gloo_bench.py --coll {a.coll}", "collective": a.coll,
            "library": version, "nranks": r.n, "hosts": [host] * r.n,
            "loadavg": open("/proc/loadavg").read().strip(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpus": os.cpu_count(),
            "options": {"minbytes": a.minbytes, "maxbytes": a.maxbytes,
                        "stepbytes": a.stepbytes, "stepfactor": a.stepfactor,
                        "iters": a.iters, "warmup_iters": a.warmup_iters,
                        "agg_iters": a.agg_iters, "check": a.check, "average": a.average,
                        "timeout": a.timeout, "iter_bytes": a.iter_bytes,
                        "datatype": a.datatype, "op": a.op, "root": a.root,
                        "gloo_threads": a.gloo_threads},
            "results": []}


def sweep(a, r, root, doc):
    torch = r.torch
    r.root = root
    r.set_size(a.maxbytes)
    n_elems = max(r.send_count, r.recv_count)
    send = torch.ones(n_elems, dtype=torch.float32)
    recv = torch.ones(n_elems, dtype=torch.float32)
    r.run(send, recv, False, a.warmup_iters)
    r.set_size(a.minbytes)
    r.run(send, recv, False, a.warmup_iters)
    rows = []
    op = "sum" if a.coll in REDUCING else "none"
    rt = root if a.coll in ROOTED else -1
    for nbytes in sizes(a):
        r.set_size(nbytes)
        r.what = f"{a.coll} ({r.size_bytes} B)"
        out = r.measure(send, recv, False)
        inp = r.measure(send, recv, True)
        rows += [out, inp]
        if r.rank == 0:
            print(f"{r.size_bytes:12d}  {r.block:12d}  {'float':>8s}  {op:>6s}  {rt:6d}"
                  + fmt_half(out) + fmt_half(inp), flush=True)
            doc["results"].append({"size": r.size_bytes, "count": r.block, "type": "float",
                                   "redop": op, "root": rt, "out_of_place": out,
                                   "in_place": inp})
    return rows


def rank_main(a):
    r = Rank(a)
    torch = r.torch
    pids = torch.zeros(r.n, dtype=torch.int64)
    pids[r.rank] = os.getpid()
    r.pg.allreduce([pids]).wait()
    host = socket.gethostname()
    version = (f"PyTorch {torch.__version__} Gloo (ProcessGroupGloo, TCP loopback, "
               f"{a.gloo_threads} thread)")
    doc = json_header(a, r, pids.tolist(), host, version)
    if r.rank == 0:
        print(f"# {version}: {a.coll}")
        print_header(a, r.n, pids.tolist(), host)
    rows = []
    if a.coll == "reduce_scatter":
        doc["unsupported"] = "ProcessGroupGloo has no reduce_scatter in PyTorch 1.13"
        if r.rank == 0:
            print(f"# {doc['unsupported']}, skipping")
    else:
        roots = [0] if a.coll not in ROOTED else (
            list(range(r.n)) if a.root == "all" else [int(a.root)])
        for root in roots:
            rows += sweep(a, r, root, doc)
    wrong = sum(1 for x in rows if x["wrong"])
    avg = sum(x["busbw"] for x in rows) / len(rows) if rows else 0.0
    if r.rank == 0:
        print(f"# Out of bounds values : {wrong} {'FAILED' if wrong else 'OK'}")
        print(f"# Avg bus bandwidth    : {avg:g} \n#", flush=True)
        if a.json:
            doc["results_wrong"], doc["avg_busbw"] = wrong, avg
            with open(a.json, "w") as f:
                json.dump(doc, f, indent=1)
    return 1 if wrong else 0


def main(argv):
    a = parse_args(argv)
    if "RANK" not in os.environ:
        return spawn(a, argv)
    try:
        return rank_main(a)
    except RuntimeError as e:  # Gloo's timeout (-T) and connection errors
        rank = os.environ.get("RANK", "?")
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        timed_out = "imeout" in msg or "timed out" in msg
        what = f"did not complete within {a.timeout} s (-T)" if timed_out else "failed"
        print(f"{socket.gethostname()}:{os.getpid()} rank {rank}: gloo {a.coll} {what}: {msg}",
              file=sys.stderr, flush=True)
        return EXIT_TIMEOUT if timed_out else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
