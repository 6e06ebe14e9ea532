"""What a PyTorch user sees: CCL's torch ops against torch.distributed's NCCL on the same
tensors, one process per GPU.

    torchrun --nproc_per_node=4 bench/torch_bench.py [--sizes 1K,64K,1M,16M,128M]
        [--colls all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce]
        [--csv out.csv] [--md out.md]

(With a build tree: PYTHONPATH=python/src CCL_LIBRARY=build/libccl.so.) Per collective and
message size (nccl-tests' bytes: all_gather's output, reduce_scatter's and all_to_all's
input), bf16, the time per call of:

  nccl      torch.distributed (backend nccl) on ordinary tensors from torch's caching
            allocator: dist.all_reduce (in place), all_gather_into_tensor,
            reduce_scatter_tensor, all_to_all_single, broadcast, reduce
  ccl       ccl.torch on the very same tensors: all_reduce_, all_gather_into_,
            reduce_scatter_into_, the communicator's all_to_all, broadcast_, reduce_
  ccl_sym   ccl.torch on tensors from comm.empty (CCL's symmetric heap: zero copy)

each eager (CALLS calls back to back, timed with CUDA events around all of them, the
host launching every call) and in a CUDA graph (CALLS calls captured once, replayed
REPLAYS times). Every figure is the median of SAMPLES samples of the maximum over ranks.
Before timing, each path's result is checked once against NCCL's on the same input.
Rank 0 prints a table per collective (Markdown) and writes --csv and --md."""
import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "src"))
import ccl  # noqa: E402
import ccl.torch as cclt  # noqa: E402

COLLS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"]


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    for unit, mul in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(unit):
            return int(s[:-1]) * mul
    return int(s)


def buffers(coll, nbytes, n, alloc):
    """(send, recv) for one call of coll at nccl-tests' size nbytes; in place where the
    collective's usual torch form is (all_reduce, broadcast, reduce: recv is send)."""
    elems = nbytes // 2
    if coll in ("all_reduce", "broadcast", "reduce"):
        t = alloc(elems)
        return t, t
    if coll == "all_gather":
        return alloc(elems // n), alloc(elems // n * n)
    if coll == "reduce_scatter":
        return alloc(elems // n * n), alloc(elems // n)
    return alloc(elems // n * n), alloc(elems // n * n)  # all_to_all


def nccl_call(coll, send, recv):
    if coll == "all_reduce":
        return lambda: dist.all_reduce(send)
    if coll == "all_gather":
        return lambda: dist.all_gather_into_tensor(recv, send)
    if coll == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(recv, send)
    if coll == "all_to_all":
        return lambda: dist.all_to_all_single(recv, send)
    if coll == "broadcast":
        return lambda: dist.broadcast(send, src=0)
    return lambda: dist.reduce(send, dst=0)


def ccl_call(coll, comm, send, recv):
    if coll == "all_reduce":
        return lambda: cclt.all_reduce_(send, comm)
    if coll == "all_gather":
        return lambda: cclt.all_gather_into_(recv, send, comm)
    if coll == "reduce_scatter":
        return lambda: cclt.reduce_scatter_into_(recv, send, comm)
    if coll == "all_to_all":
        return lambda: comm.all_to_all(recv, send)
    if coll == "broadcast":
        return lambda: cclt.broadcast_(send, comm, root=0)
    return lambda: cclt.reduce_(send, comm, root=0)


def max_over_ranks(x):
    t = torch.tensor([x], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def median_us(run, per, samples):
    """The median over samples of the max over ranks of run()'s GPU time divided by per,
    in us; every sample starts with the ranks lined up and their GPUs idle."""
    out = []
    for _ in range(samples):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        out.append(max_over_ranks(a.elapsed_time(b) * 1000.0 / per))
    return statistics.median(out)


def time_eager(fn, calls, samples):
    def run():
        for _ in range(calls):
            fn()
    return median_us(run, calls, samples)


def time_graph(fn, calls, replays, samples):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm-up on the capture stream (compiles, allocates staging)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()

    def run():
        for _ in range(replays):
            g.replay()
    us = median_us(run, calls * replays, samples)
    del g
    return us


def fill(t, rank):
    # Small integers, exact in bf16 for every sum of up to 64 ranks.
    t.copy_(((torch.arange(t.numel(), device=t.device) + 7 * rank) % 5).to(t.dtype).view(t.shape))


def check(coll, comm, rank, n, nbytes, make_plain, make_sym):
    """Each CCL path's result equals NCCL's on the same input (1 when so)."""
    s0, r0 = buffers(coll, nbytes, n, make_plain)
    fill(s0, rank)
    want_in = s0.clone()
    nccl_call(coll, s0, r0)()
    want = (s0 if coll in ("all_reduce", "broadcast", "reduce") else r0).clone()
    ok = 1
    for make in (make_plain, make_sym):
        s, r = buffers(coll, nbytes, n, make)
        s.copy_(want_in)
        ccl_call(coll, comm, s, r)()
        got = s if coll in ("all_reduce", "broadcast", "reduce") else r
        torch.cuda.synchronize()
        if coll == "reduce" and rank != 0:
            continue
        ok &= int(torch.equal(got, want))
    return int(max_over_ranks(1 - ok) == 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1K,64K,1M,16M,128M")
    ap.add_argument("--colls", default=",".join(COLLS))
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--csv")
    ap.add_argument("--md")
    a = ap.parse_args()
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    comm = ccl.init_rank()
    make_plain = lambda e: torch.empty(e, dtype=torch.bfloat16, device="cuda")  # noqa: E731
    make_sym = lambda e: comm.empty(e, torch.bfloat16)  # noqa: E731
    rows = []
    for coll in a.colls.split(","):
        for size in a.sizes.split(","):
            nbytes = parse_size(size)
            ok = check(coll, comm, rank, n, nbytes, make_plain, make_sym)
            row = {"collective": coll, "bytes": nbytes, "ranks": n, "checked": "ok" if ok else "WRONG"}
            s, r = buffers(coll, nbytes, n, make_plain)
            ss, rs = buffers(coll, nbytes, n, make_sym)
            for name, fn in (("nccl", nccl_call(coll, s, r)), ("ccl", ccl_call(coll, comm, s, r)),
                             ("ccl_sym", ccl_call(coll, comm, ss, rs))):
                row[f"{name}_graph_us"] = time_graph(fn, a.calls, a.replays, a.samples)
                row[f"{name}_eager_us"] = time_eager(fn, a.calls, a.samples)
            comm.synchronize()
            rows.append(row)
            if rank == 0:
                print(f"{coll} {nbytes}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if k.endswith("_us"))
                      + f" ({row['checked']})", flush=True)
    if rank == 0:
        keys = list(rows[0].keys())
        if a.csv:
            with open(a.csv, "w") as f:
                f.write(",".join(keys) + "\n")
                for r in rows:
                    f.write(",".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + "\n")
        md = [f"{n} ranks, {torch.cuda.get_device_name()}, bf16, us per call (max over ranks, median of "
              f"{a.samples}); graph: {a.calls} calls captured, {a.replays} replays; eager: {a.calls} calls"]
        for coll in a.colls.split(","):
            md.append(f"\n### {coll}\n\n| bytes | NCCL graph | CCL graph | CCL/NCCL | NCCL eager | CCL eager | "
                      "CCL/NCCL | CCL sym graph | CCL sym eager | check |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
            for r in rows:
                if r["collective"] != coll:
                    continue
                md.append(f"| {r['bytes']} | {r['nccl_graph_us']:.2f} | {r['ccl_graph_us']:.2f} | "
                          f"{r['ccl_graph_us'] / r['nccl_graph_us']:.2f} | {r['nccl_eager_us']:.2f} | "
                          f"{r['ccl_eager_us']:.2f} | {r['ccl_eager_us'] / r['nccl_eager_us']:.2f} | "
                          f"{r['ccl_sym_graph_us']:.2f} | {r['ccl_sym_eager_us']:.2f} | {r['checked']} |")
        text = "\n".join(md) + "\n"
        print(text)
        if a.md:
            open(a.md, "w").write(text)
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
