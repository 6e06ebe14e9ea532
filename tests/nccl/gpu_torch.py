"""gpu_torch.py: one rank of tests/nccl/gpu_torch.sh, under torchrun, on GPUs.

torch.distributed's NCCL backend calls whatever NCCL the process has; gpu_torch.sh runs
this file with libccl_nccl.so preloaded (or without it, for the plain NCCL baseline).

    python gpu_torch.py colls            every collective torch.distributed offers, checked
    python gpu_torch.py ddp OUT.pt       a few DDP steps; rank 0 saves the parameters
    python gpu_torch.py graph            all-reduces captured in a CUDA graph, replayed
    python gpu_torch.py watchdog         the last rank dies after the init; the others
                                         must fail (not hang), through torch's watchdog

Rank 0 prints "ok NAME" or "FAIL NAME: why" lines; every rank exits non-zero on a
failure it saw.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
LOCAL = int(os.environ.get("LOCAL_RANK", RANK))
# libccl_nccl's route when it is preloaded ("" without it: torch's own NCCL).
ROUTE = os.environ.get("CCL_NCCL_ROUTE", "auto") if "libccl_nccl" in os.environ.get("LD_PRELOAD", "") else ""
failures = 0


def say(ok, name, why=""):
    global failures
    if not ok:
        failures += 1
    if RANK == 0 or not ok:
        print(f"ok {name}" if ok else f"FAIL {name}: rank {RANK}: {why}", flush=True)


def init(timeout_s=120):
    torch.cuda.set_device(LOCAL)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=torch.device("cuda", LOCAL))


def exact(t, want, name):
    ok = torch.equal(t.cpu(), want.cpu())
    why = "" if ok else f"first difference at {(t.cpu() != want.cpu()).nonzero()[0].tolist()}"
    say(ok, name, why)


def colls():
    init()
    dev = torch.device("cuda", LOCAL)
    # Small integers: every sum is exact in every dtype (bf16 holds integers to 256).
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8, torch.int8):
        for n in (1, 1023, 1 << 20):
            base = torch.arange(n, device=dev) % 7
            x = (base + RANK).to(dtype)
            tag = f"{str(dtype).split('.')[-1]}.{n}"
            y = x.clone()
            dist.all_reduce(y)
            exact(y, (base * WORLD + WORLD * (WORLD - 1) // 2).to(dtype), f"torch.all_reduce.sum.{tag}")
            y = x.clone()
            dist.all_reduce(y, op=dist.ReduceOp.MAX)
            exact(y, (base + WORLD - 1).to(dtype), f"torch.all_reduce.max.{tag}")
            out = torch.empty(n * WORLD, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, x)
            exact(out, torch.cat([(base + r).to(dtype) for r in range(WORLD)]), f"torch.all_gather.{tag}")
            inp = torch.cat([(base + r + RANK).to(dtype) for r in range(WORLD)])
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, inp)
            exact(out, (base * WORLD + RANK * WORLD + WORLD * (WORLD - 1) // 2).to(dtype),
                  f"torch.reduce_scatter.{tag}")
            y = x.clone()
            dist.broadcast(y, src=WORLD - 1)
            exact(y, (base + WORLD - 1).to(dtype), f"torch.broadcast.{tag}")
            y = x.clone()
            dist.reduce(y, dst=0)
            if RANK == 0:
                exact(y, (base * WORLD + WORLD * (WORLD - 1) // 2).to(dtype), f"torch.reduce.{tag}")
            inp = torch.cat([(base + 10 * RANK + r).to(dtype) for r in range(WORLD)])
            out = torch.empty_like(inp)
            dist.all_to_all_single(out, inp)
            exact(out, torch.cat([(base + 10 * r + RANK).to(dtype) for r in range(WORLD)]), f"torch.all_to_all.{tag}")
    # avg and premul_sum (floating point only).
    x = torch.full((4096,), float(RANK + 1), device=dev)
    y = x.clone()
    dist.all_reduce(y, op=dist.ReduceOp.AVG)
    exact(y, torch.full_like(y, (WORLD + 1) / 2), "torch.all_reduce.avg")
    # torch makes the operator with ncclRedOpCreatePreMulSum (a host scalar) and ignores
    # its result, so a failed creation would sum plainly. libccl has no pre-multiplied
    # sum on GPUs: with CCL_NCCL_ROUTE=ccl it is refused (checked last, below).
    if ROUTE != "ccl":
        y = x.clone()
        dist.all_reduce(y, op=dist._make_nccl_premul_sum(2.0))
        exact(y, torch.full_like(y, float(WORLD * (WORLD + 1))), "torch.all_reduce.premul_sum")
    # Point-to-point: a ring through batch_isend_irecv, and send/recv pairs.
    x = torch.full((1000,), float(RANK), device=dev)
    y = torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, (RANK + 1) % WORLD), dist.P2POp(dist.irecv, y, (RANK - 1) % WORLD)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    exact(y, torch.full_like(y, float((RANK - 1) % WORLD)), "torch.p2p.ring")
    if RANK < 2:
        z = torch.full((77,), 5.0, device=dev) if RANK == 0 else torch.empty(77, device=dev)
        (dist.send if RANK == 0 else dist.recv)(z, 1 - RANK)
        if RANK == 1:
            exact(z, torch.full_like(z, 5.0), "torch.p2p.send-recv")
    # A subgroup (ncclCommSplit) and a barrier.
    evens = dist.new_group([r for r in range(WORLD) if r % 2 == 0])
    if RANK % 2 == 0:
        y = torch.ones(100, device=dev)
        dist.all_reduce(y, group=evens)
        exact(y, torch.full_like(y, float(len(range(0, WORLD, 2)))), "torch.subgroup.all_reduce")
    dist.barrier()
    torch.cuda.synchronize()
    say(True, "torch.barrier")
    if ROUTE == "ccl":
        try:
            y = x.clone()
            dist.all_reduce(y, op=dist._make_nccl_premul_sum(2.0))
            torch.cuda.synchronize()
            say(False, "torch.all_reduce.premul_sum.refused", "CCL_NCCL_ROUTE=ccl ran a pre-multiplied sum on GPUs")
        except Exception as e:  # torch raises the shim's ncclInvalidUsage
            say("pre-multiplied sum" in str(e) or "invalid usage" in str(e), "torch.all_reduce.premul_sum.refused",
                str(e)[:400])
    dist.destroy_process_group()


def ddp(out_path):
    init()
    dev = torch.device("cuda", LOCAL)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[LOCAL])
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1234 + RANK)
    for _ in range(5):
        xb = torch.randn(32, 256, generator=g).to(dev)
        yb = torch.randint(0, 10, (32,), generator=g).to(dev)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp_model(xb), yb).backward()
        opt.step()
    torch.cuda.synchronize()
    if RANK == 0:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, out_path)
    dist.destroy_process_group()


def graph():
    init()
    dev = torch.device("cuda", LOCAL)
    x = torch.full((1 << 16,), float(RANK), device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm up: compile and allocate before capture
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(x)
        dist.all_reduce(x)
    for k in range(3):
        x.fill_(float(RANK))
        g.replay()
        torch.cuda.synchronize()
        want = float(WORLD * (WORLD - 1) // 2) * WORLD
        exact(x, torch.full_like(x, want), f"torch.graph.replay{k}")
    dist.destroy_process_group()


def watchdog():
    init(timeout_s=int(os.environ.get("WATCHDOG_TIMEOUT_S", "60")))
    dev = torch.device("cuda", LOCAL)
    x = torch.ones(1 << 20, device=dev)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if RANK == WORLD - 1:
        print(f"rank {RANK}: dying after the init", flush=True)
        os._exit(0)
    t0 = time.time()
    try:
        for _ in range(1000):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        print(f"FAIL torch.watchdog: rank {RANK}: the all-reduces with a dead peer completed", flush=True)
        sys.exit(1)
    except Exception as e:  # torch raises once its watchdog aborted the communicator
        print(f"rank {RANK}: failed after {time.time() - t0:.1f} s as it should: {type(e).__name__}: {e}", flush=True)
        sys.exit(3)


if __name__ == "__main__":
    mode = sys.argv[1]
    {"colls": colls, "graph": graph, "watchdog": watchdog}.get(mode, lambda: ddp(sys.argv[2]))()
    sys.exit(1 if failures else 0)
