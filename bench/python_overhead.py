"""Per-call overhead of the Python path (ccl package) against the C API, same process,
same communicators, same buffers.

    PYTHONPATH=python/src CCL_LIBRARY=build/libccl.so python3 bench/python_overhead.py [--backend cpu|gpu]
        [--ranks 2] [--count 1] [--iters 2000] [--samples 5] [--clock wall|thread]

Threads mode, one Python thread per rank, an all-reduce of `count` f32 (tiny: the
collective's own time is the floor). Each line is the time per call, the median and the
minimum of `samples` samples of `iters` calls, each the max over ranks (on a shared
machine the minimum is the steadier figure). With --count 0 libccl checks the arguments
and returns without moving anything, which leaves the Python path's own cost; with
--clock thread each rank's thread counts its own CPU time (time.thread_time), not the
time it waited for a core or for the GIL, which on a busy machine is the steadier
measure of that cost (and, on the CPU backend, leaves out the backend's worker threads):

  C API (ctypes)        ccl_all_reduce through ctypes with prepared arguments (the C call
                        plus ctypes' ~0.3 us): the baseline
  comm.all_reduce       the package's method on the array (its fast road: pointer, count,
                        dtype and device of a plain tensor or array, the stream lookup)
  cclt.all_reduce_      ccl.torch's function, eager: it skips torch's dispatcher
  torch.ops.ccl...      the registered custom op through torch's dispatcher (what
                        torch.compile'd code calls), when torch is there
  ... in a CUDA graph   (GPU) the same op captured `iters` times in one graph and replayed:
                        no Python at all per call

On the CPU backend each call is followed by ccl_comm_synchronize (what the package does);
enqueue-only rows issue calls with async_op=True and synchronize once at the end, which
isolates the Python cost. On the GPU backend calls are enqueued on the rank's stream and
the stream is synchronized at the end of a sample.
"""
import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "src"))
import ccl  # noqa: E402
from ccl import _lib  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


SAMPLES = 5
clock = time.perf_counter  # --clock thread: time.thread_time


def per_rank(comms, fn, iters, samples=None):
    """fn(r, comm, iters) -> seconds for iters calls; (median, min) over samples of the max
    over ranks, per call, in microseconds."""
    samples = samples or SAMPLES
    n = len(comms)
    res = [[0.0] * samples for _ in range(n)]
    barrier = threading.Barrier(n)

    def body(r):
        fn(r, comms[r], 10)  # warm-up (loads the algorithm)
        for s in range(samples):
            barrier.wait()
            res[r][s] = fn(r, comms[r], iters)

    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    per_sample = [max(res[r][s] for r in range(n)) / iters * 1e6 for s in range(samples)]
    return statistics.median(per_sample), min(per_sample)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall")
    a = ap.parse_args()
    global SAMPLES, clock
    SAMPLES = a.samples
    if a.clock == "thread":
        clock = time.thread_time
    L = _lib.lib()
    comms = ccl.init_all(a.ranks, backend=a.backend)
    gpu = comms[0].backend == "gpu"
    if gpu:
        assert torch is not None, "the GPU bench needs torch"
        streams = [None] * a.ranks
    rows = []

    def setup(r):
        if gpu:
            torch.cuda.set_device(r % torch.cuda.device_count())
            if streams[r] is None:
                streams[r] = torch.cuda.Stream()
            torch.cuda.set_stream(streams[r])

    if torch is not None:
        bufs = [torch.ones(a.count, device=f"cuda:{r % torch.cuda.device_count()}" if gpu else "cpu")
                for r in range(a.ranks)]
    else:
        import numpy as np

        bufs = [np.ones(a.count, np.float32) for _ in range(a.ranks)]

    def ptr(b):
        return b.data_ptr() if torch is not None else b.ctypes.data

    def sync(r, c):
        if gpu:
            streams[r].synchronize()

    def c_api(r, c, iters, enqueue_only=False):
        setup(r)
        h, p, n = c.handle, ptr(bufs[r]), a.count
        s = streams[r].cuda_stream if gpu else None
        f, syn = L.ccl_all_reduce, L.ccl_comm_synchronize
        t0 = clock()
        for _ in range(iters):
            if f(p, p, n, 0, 0, h, s):
                raise RuntimeError(c.last_error())
            if not gpu and not enqueue_only:
                syn(h)
        if not gpu and enqueue_only:
            syn(h)
        sync(r, c)
        return clock() - t0

    def py_method(r, c, iters, enqueue_only=False):
        setup(r)
        x = bufs[r]
        t0 = clock()
        for _ in range(iters):
            c.all_reduce(x, async_op=enqueue_only)
        if enqueue_only:
            c.synchronize()
        sync(r, c)
        return clock() - t0

    rows.append(("C API (ctypes), call + synchronize" if not gpu else "C API (ctypes), eager",
                 per_rank(comms, c_api, a.iters)))
    rows.append(("comm.all_reduce" if gpu else "comm.all_reduce (returns when done)", per_rank(comms, py_method, a.iters)))
    if not gpu:
        rows.append(("C API (ctypes), enqueue only", per_rank(comms, lambda r, c, i: c_api(r, c, i, True), a.iters)))
        rows.append(("comm.all_reduce(async_op=True), enqueue only",
                     per_rank(comms, lambda r, c, i: py_method(r, c, i, True), a.iters)))
    if torch is not None:
        import ccl.torch as cclt

        def op(r, c, iters):
            setup(r)
            x = bufs[r]
            t0 = clock()
            for _ in range(iters):
                cclt.all_reduce_(x, c)
            sync(r, c)
            return clock() - t0

        rows.append(("cclt.all_reduce_ (eager: skips the dispatcher)", per_rank(comms, op, a.iters)))

        def dispatched(r, c, iters):
            setup(r)
            x, h, f = bufs[r], c.handle, torch.ops.ccl.all_reduce_
            t0 = clock()
            for _ in range(iters):
                f(x, h, "sum")
            sync(r, c)
            return clock() - t0

        rows.append(("torch.ops.ccl.all_reduce_ (torch's dispatcher)", per_rank(comms, dispatched, a.iters)))
        if gpu:
            graphs = [None] * a.ranks

            def graph(r, c, iters):
                setup(r)
                x = bufs[r]
                if graphs[r] is None or graphs[r][1] != iters:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=streams[r], capture_error_mode="thread_local"):
                        for _ in range(iters):
                            cclt.all_reduce_(x, c)
                    graphs[r] = (g, iters)
                streams[r].synchronize()
                t0 = clock()
                graphs[r][0].replay()
                streams[r].synchronize()
                return clock() - t0

            rows.append(("cclt.all_reduce_ in a CUDA graph (replay)", per_rank(comms, graph, a.iters)))
    print(f"# all_reduce of {a.count} f32, {a.ranks} ranks (threads), {comms[0].backend} backend, {a.clock} clock, "
          f"{a.iters} calls x {a.samples} samples; us per call (median and min of samples, max over ranks)")
    base, base_min = rows[0][1]
    print(f"{'':48s} {'median':>9s}    {'min':>7s}")
    for name, (us, least) in rows:
        print(f"{name:48s} {us:9.2f} us {least:7.2f} us   "
              f"({us - base:+.2f} / {least - base_min:+.2f} us vs the first row)")
    for c in comms:
        c.destroy()


if __name__ == "__main__":
    main()
