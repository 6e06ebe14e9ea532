"""What a PyTorch user sees: CCL's torch ops against torch.distributed's NCCL on the same
tensors, one process per GPU.

    torchrun --nproc_per_node=4 bench/torch_bench.py [--sizes 1K,64K,1M,16M,128M]
        [--colls all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce
                 (default), all_to_all_v, send_recv]
        [--buffers torch,symmetric,pool,registered] [--csv out.csv] [--md out.md]

(With a build tree: PYTHONPATH=python/src CCL_LIBRARY=build/libccl.so.) Per collective and
message size (nccl-tests' bytes: all_gather's output, reduce_scatter's and all_to_all's
input), bf16, the time per call of:

  nccl      torch.distributed (backend nccl) on ordinary tensors from torch's caching
            allocator: dist.all_reduce (in place), all_gather_into_tensor,
            reduce_scatter_tensor, all_to_all_single, broadcast, reduce; and on request
            all_to_all_v (all_to_all_single with split sizes: a mixture-of-experts
            dispatch, rank r sending rank p 1 to 3 shares as (p - r) mod N grows, about
            nbytes in all) and send_recv (a ring: batch_isend_irecv of a send to rank r + 1
            and a receive from r - 1, nbytes each, as pipeline stages pass activations)

and of ccl.torch (all_reduce_, all_gather_into_, reduce_scatter_into_, the
communicator's all_to_all, broadcast_, reduce_; all_to_all_v, and send and recv in one
ccl.group) on each kind of tensors --buffers names (default: torch,symmetric):

  torch       ccl     the very tensors NCCL ran on (ordinary ones: CCL stages them)
  symmetric   ccl_sym tensors from comm.empty (CCL's symmetric heap: zero copy)
  pool        ccl_pool tensors made under ccl.torch.mem_pool(comm) (registered as the
                      pool allocates them: zero copy; torch 2.5 or later)
  registered  ccl_reg tensors from torch's expandable segments (cuMemCreate memory),
                      each registered with comm.register before its timing and
                      deregistered after (zero copy); the rest of the run keeps torch's
                      allocator setting, so the torch kind stays cudaMalloc memory
                      unless PYTORCH_CUDA_ALLOC_CONF turns expandable segments on

each eager (CALLS calls back to back, timed with CUDA events around all of them, the
host launching every call) and in a CUDA graph (CALLS calls captured once, replayed
REPLAYS times). Every figure is the median of SAMPLES samples of the maximum over ranks.
Before timing, each kind's result is checked once against NCCL's on the same input. A
kind whose tensors cannot be had (no MemPool in this torch, memory comm.register
refuses) is reported, with the reason, and its figures are nan. Rank 0 prints a line per
size, a Markdown table per collective (graph figures, then eager ones, each kind with its
ratio to NCCL), and writes --csv (columns KEY_graph_us and KEY_eager_us per kind, NCCL's
first) and --md.

The arguments are read before torch is imported: --help and bad arguments need neither
torch nor a GPU (tests/python/test_torch_bench.py)."""
import argparse
import contextlib
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "src"))

COLLS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"]
MORE_COLLS = ["all_to_all_v", "send_recv"]  # timed when --colls names them
# What NCCL cannot run in a CUDA graph through torch.distributed (its graph figures n/a).
NCCL_NO_GRAPH = {"send_recv": "torch.distributed's batch_isend_irecv is not captured into CUDA graphs "
                              "(pytorch/pytorch#133984): NCCL eager only"}
INPLACE = ("all_reduce", "broadcast", "reduce")

# --buffers' words: the CSV's column prefix and the table's label of each kind of tensors.
KINDS = {
    "torch": ("ccl", "CCL"),
    "symmetric": ("ccl_sym", "CCL sym"),
    "pool": ("ccl_pool", "CCL pool"),
    "registered": ("ccl_reg", "CCL reg"),
}
DEFAULT_BUFFERS = "torch,symmetric"

# torch, torch.distributed and ccl, imported by load() once the arguments are read.
torch = dist = ccl = cclt = None


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    for unit, mul in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(unit):
            return int(s[:-1]) * mul
    return int(s)


def _words(value, allowed, what):
    words = [w.strip() for w in value.split(",") if w.strip()]
    bad = [w for w in words if w not in allowed]
    if bad or not words:
        raise argparse.ArgumentTypeError(f"{what} {value!r}: expected a comma-separated list of "
                                         f"{', '.join(allowed)}" + (f" (not {', '.join(bad)})" if bad else ""))
    if len(set(words)) != len(words):
        raise argparse.ArgumentTypeError(f"{what} {value!r}: a word appears twice")
    return words


def _sizes(value):
    try:
        sizes = [parse_size(s) for s in value.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes {value!r}: expected sizes such as 1K,64K,1M") from None
    if not sizes or min(sizes) < 2:
        raise argparse.ArgumentTypeError(f"--sizes {value!r}: every size must be at least one bf16 element (2 bytes)")
    return sizes


def _positive(value):
    try:
        v = int(value)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a positive integer")
    return v


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="torch_bench.py", description="CCL's torch ops against torch.distributed's "
                                 "NCCL on the same tensors; run under torchrun, one process per GPU.")
    ap.add_argument("--sizes", type=_sizes, default=_sizes("1K,64K,1M,16M,128M"),
                    help="message sizes (nccl-tests' bytes) [1K,64K,1M,16M,128M]")
    ap.add_argument("--colls", type=lambda v: _words(v, COLLS + MORE_COLLS, "--colls"), default=list(COLLS),
                    help=f"collectives, of {','.join(COLLS + MORE_COLLS)} [{','.join(COLLS)}]")
    ap.add_argument("--buffers", type=lambda v: _words(v, list(KINDS), "--buffers"),
                    default=DEFAULT_BUFFERS.split(","),
                    help="kinds of tensors CCL runs on: torch (NCCL's own tensors), symmetric (comm.empty), pool "
                         "(ccl.torch.mem_pool), registered (expandable segments + comm.register) "
                         f"[{DEFAULT_BUFFERS}]")
    ap.add_argument("--calls", type=_positive, default=10, help="calls per eager sample and per graph [10]")
    ap.add_argument("--replays", type=_positive, default=10, help="graph replays per sample [10]")
    ap.add_argument("--samples", type=_positive, default=5, help="samples per figure (their median) [5]")
    ap.add_argument("--csv")
    ap.add_argument("--md")
    return ap.parse_args(argv)


def load():
    """Imports torch, torch.distributed and ccl (exits, saying so, where torch is missing)."""
    global torch, dist, ccl, cclt
    try:
        import torch as t
        import torch.distributed as d
    except ImportError as e:
        sys.exit(f"torch_bench.py: needs torch with CUDA ({e})")
    import ccl as c
    import ccl.torch as ct
    torch, dist, ccl, cclt = t, d, c, ct


# ---- the kinds of tensors ----

class Unavailable(Exception):
    """A kind of tensors this run cannot make (every rank alike), with the reason: at any
    size, or (one_size) at this collective and size only, as symmetric tensors that do
    not fit the heap beside what it already holds."""

    def __init__(self, why, one_size=False):
        super().__init__(why)
        self.one_size = one_size


def note_unavailable(unavailable, kind, e):
    """Records e: for the kind (nothing more of it is tried), or for its size alone."""
    if e.one_size:
        why = f"{KINDS[kind][1]}: {e}"
        if why not in unavailable.setdefault("sizes", []):  # the check and the timing both meet it
            unavailable["sizes"].append(why)
    else:
        unavailable[kind] = str(e)


def expandable_by_default():
    """Whether the environment turned torch's expandable segments on for the whole run."""
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if "expandable_segments:true" in os.environ.get(var, "").replace(" ", "").lower():
            return True
    return False


@contextlib.contextmanager
def expandable_segments():
    """Tensors allocated inside come from torch's expandable segments (cuMemCreate memory
    that comm.register can map), whatever the run's setting is; the setting is restored
    after. torch's caching allocator may hand out a free block of a cudaMalloc segment even
    with the setting on, so the cache is emptied first (every rank alike: segments free on
    one are free on all), and callers allocate from the large pool (more than 1 MiB),
    whose segments no other live tensor of this benchmark holds then."""
    if expandable_by_default():
        yield
        return
    setting = (getattr(torch.cuda.memory, "_set_allocator_settings", None)
               or getattr(torch._C, "_accelerator_setAllocatorSettings", None))
    if setting is None:
        raise Unavailable(f"torch {torch.__version__} cannot turn expandable segments on at run time; set "
                          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    setting("expandable_segments:True")
    try:
        yield
    finally:
        setting("expandable_segments:False")


def alloc_plain(elems):
    return torch.empty(elems, dtype=torch.bfloat16, device="cuda")


def alloc_large(elems):
    """elems bf16 elements from the large pool of torch's caching allocator: a view of a
    tensor of more than 1 MiB (1 MiB and less come from the small pool)."""
    return torch.empty(max(elems, (1 << 19) + 64), dtype=torch.bfloat16, device="cuda")[:elems]


def splits(nbytes, n):
    """all_to_all_v's counts: [r][p] elements from rank r to rank p, 1 to 3 shares as
    (p - r) mod n grows (every rank sends most to a different rank), about nbytes from each
    rank; the same on every rank."""
    elems = max(nbytes // 2, n)
    weight = [[1 + 2 * ((p - r) % n) / max(n - 1, 1) for p in range(n)] for r in range(n)]
    return [[max(1, int(elems * w / sum(row))) for w in row] for row in weight]


def my_splits(nbytes):
    """all_to_all_v's (send counts, receive counts) of this rank, in elements."""
    n, me = dist.get_world_size(), dist.get_rank()
    c = splits(nbytes, n)
    return c[me], [c[p][me] for p in range(n)]


def shapes(coll, nbytes, n):
    """(send elements, receive elements, in place) of one call at nccl-tests' size nbytes:
    in place where the collective's usual torch form is (all_reduce, broadcast, reduce)."""
    elems = nbytes // 2
    if coll in INPLACE:
        return elems, elems, True
    if coll == "all_gather":
        return elems // n, elems // n * n, False
    if coll == "reduce_scatter":
        return elems // n * n, elems // n, False
    if coll == "all_to_all_v":
        sc, rc = my_splits(nbytes)
        return sum(sc), sum(rc), False
    if coll == "send_recv":
        return elems, elems, False
    return elems // n * n, elems // n * n, False  # all_to_all


def buffers(coll, nbytes, n, alloc):
    """(send, recv) for one call; recv is send where the call is in place."""
    s, r, inplace = shapes(coll, nbytes, n)
    t = alloc(s)
    return (t, t) if inplace else (t, alloc(r))


@contextlib.contextmanager
def kind_buffers(kind, comm, coll, nbytes, n):
    """(send, recv) of the kind of tensors --buffers names, for the length of the block.
    Every rank makes the same tensors in the same order (pool allocations and
    registrations are collective). Raises Unavailable (on every rank alike) where the kind
    cannot be had."""
    if kind == "torch":
        yield buffers(coll, nbytes, n, alloc_plain)
    elif kind == "symmetric":
        try:
            pair = buffers(coll, nbytes, n, lambda e: comm.empty(e, torch.bfloat16))
        except ccl.OutOfMemoryError as e:
            raise Unavailable(f"{coll} at {nbytes} bytes: {e}", one_size=True) from None
        yield pair
    elif kind == "pool":
        try:
            pool = cclt.mem_pool(comm)
        except ccl.CclError as e:
            raise Unavailable(str(e)) from None
        with pool:
            pair = buffers(coll, nbytes, n, alloc_plain)
        yield pair
    else:
        with expandable_segments():
            send, recv = buffers(coll, nbytes, n, alloc_large)
        regs = []
        try:
            for t in (send,) if recv is send else (send, recv):
                regs.append(comm.register(t))
        except ccl.CclError as e:
            for g in reversed(regs):
                g.deregister()
            raise Unavailable(f"comm.register refused the tensor: {e}") from None
        yield send, recv
        # Deregistration is collective: not after a failure (the peers may be anywhere;
        # comm.destroy releases what is left).
        torch.cuda.synchronize()
        for g in reversed(regs):
            g.deregister()


# ---- the calls and their clocks ----

def ring_peers():
    """send_recv's peers: (the rank this one sends to, the rank it receives from)."""
    n, me = dist.get_world_size(), dist.get_rank()
    return (me + 1) % n, (me - 1) % n


def nccl_call(coll, send, recv, nbytes):
    if coll == "all_to_all_v":
        sc, rc = my_splits(nbytes)
        return lambda: dist.all_to_all_single(recv, send, output_split_sizes=rc, input_split_sizes=sc)
    if coll == "send_recv":
        to, frm = ring_peers()

        def exchange():
            for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, to), dist.P2POp(dist.irecv, recv, frm)]):
                req.wait()
        return exchange
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


def ccl_call(coll, comm, send, recv, nbytes):
    if coll == "all_to_all_v":
        sc, rc = my_splits(nbytes)
        return lambda: comm.all_to_all_v(recv, send, sc, rc)
    if coll == "send_recv":
        to, frm = ring_peers()

        def exchange():
            with ccl.group():
                comm.send(send, to)
                comm.recv(recv, frm)
        return exchange
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
    # Before the tensors go (a graph that captured a call on registered memory must not
    # outlive its registration).
    torch.cuda.synchronize()
    del g
    return us


def fill(t, rank):
    # Small integers, exact in bf16 for every sum of up to 64 ranks.
    t.copy_(((torch.arange(t.numel(), device=t.device) + 7 * rank) % 5).to(t.dtype).view(t.shape))


def check(coll, comm, rank, n, nbytes, kinds, unavailable):
    """Each kind's CCL result equals NCCL's on the same input: the kinds whose result
    differed on some rank (empty when none). The input and NCCL's result are kept on the
    host, so that no tensor of torch's default pool lives while a kind allocates (see
    expandable_segments)."""
    s0, r0 = buffers(coll, nbytes, n, alloc_plain)
    fill(s0, rank)
    want_in = s0.cpu()
    nccl_call(coll, s0, r0, nbytes)()
    want = (s0 if coll in INPLACE else r0).cpu()
    del s0, r0
    wrong = []
    for kind in kinds:
        if kind in unavailable:
            continue
        bad = 0
        try:
            with kind_buffers(kind, comm, coll, nbytes, n) as (s, r):
                s.copy_(want_in)
                ccl_call(coll, comm, s, r, nbytes)()
                got = s if coll in INPLACE else r
                torch.cuda.synchronize()
                bad = int(not (coll == "reduce" and rank != 0) and not torch.equal(got.cpu(), want))
                del s, r, got
        except Unavailable as e:
            note_unavailable(unavailable, kind, e)
            continue
        if max_over_ranks(bad):
            wrong.append(kind)
    return wrong


# ---- the outputs (rank 0) ----

def columns(kinds):
    """The CSV's timing columns: NCCL's, then each kind's, graph then eager."""
    return [f"{key}_{m}_us" for key in ["nccl"] + [KINDS[k][0] for k in kinds] for m in ("graph", "eager")]


def write_csv(path, rows, kinds):
    keys = ["collective", "bytes", "ranks", "checked"] + columns(kinds)
    with open(path, "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + "\n")


def _us(v):
    return "n/a" if v is None or math.isnan(v) else f"{v:.2f}"


def _ratio(a, b):
    return "n/a" if a is None or b is None or math.isnan(a) or math.isnan(b) or b <= 0 else f"{a / b:.2f}"


def markdown(rows, kinds, colls, title, unavailable):
    """A table per collective: bytes, NCCL's graph time, each kind's and its ratio to
    NCCL's, the same for eager, and the check."""
    md = [title]
    for kind, why in unavailable.items():
        if kind != "sizes":
            md.append(f"\n{KINDS[kind][1]} (--buffers {kind}): not timed: {why}")
    for why in unavailable.get("sizes", []):
        md.append(f"\nnot timed: {why}")
    head = ["bytes"]
    for m in ("graph", "eager"):
        head.append(f"NCCL {m}")
        for k in kinds:
            head += [f"{KINDS[k][1]} {m}", f"{KINDS[k][1]}/NCCL"]
    head.append("check")
    for coll in colls:
        md.append(f"\n### {coll}\n")
        if coll in NCCL_NO_GRAPH:
            md.append(NCCL_NO_GRAPH[coll] + ".\n")
        md.append("| " + " | ".join(head) + " |\n|" + "---:|" * (len(head) - 1) + "---|")
        for r in rows:
            if r["collective"] != coll:
                continue
            cells = [str(r["bytes"])]
            for m in ("graph", "eager"):
                base = r[f"nccl_{m}_us"]
                cells.append(_us(base))
                for k in kinds:
                    v = r[f"{KINDS[k][0]}_{m}_us"]
                    cells += [_us(v), _ratio(v, base)]
            cells.append(r["checked"])
            md.append("| " + " | ".join(cells) + " |")
    return "\n".join(md) + "\n"


# ---- the run ----

def time_ordinary(row, coll, comm, nbytes, n, ccl_too, a):
    """NCCL, and CCL where ccl_too, on the very same ordinary tensors, into row; the
    tensors are gone when it returns (before another kind allocates)."""
    s, r = buffers(coll, nbytes, n, alloc_plain)
    timed = [("nccl", nccl_call(coll, s, r, nbytes))]
    if ccl_too:
        timed.append(("ccl", ccl_call(coll, comm, s, r, nbytes)))
    for name, fn in timed:
        no_graph = name == "nccl" and coll in NCCL_NO_GRAPH
        row[f"{name}_graph_us"] = math.nan if no_graph else time_graph(fn, a.calls, a.replays, a.samples)
        row[f"{name}_eager_us"] = time_eager(fn, a.calls, a.samples)
    torch.cuda.synchronize()


def time_kind(row, kind, coll, comm, nbytes, n, a, unavailable):
    """CCL on a kind's own tensors, into row (nan where the kind is unavailable, which
    unavailable then says why)."""
    key = KINDS[kind][0]
    row[f"{key}_graph_us"] = row[f"{key}_eager_us"] = math.nan
    if kind in unavailable:
        return
    try:
        with kind_buffers(kind, comm, coll, nbytes, n) as (s, r):
            fn = ccl_call(coll, comm, s, r, nbytes)
            row[f"{key}_graph_us"] = time_graph(fn, a.calls, a.replays, a.samples)
            row[f"{key}_eager_us"] = time_eager(fn, a.calls, a.samples)
            comm.synchronize()
            del fn, s, r
    except Unavailable as e:
        note_unavailable(unavailable, kind, e)


def main(argv=None):
    a = parse_args(argv)
    load()
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        sys.exit("torch_bench.py: run it under torchrun, one process per GPU (RANK and WORLD_SIZE are not set)")
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    # The heap holds the symmetric kind's tensors (send and receive, up to the largest
    # size each) and the torch kind's staging; sized so, every size runs whole rather than
    # in pieces (CCL_HEAP_BYTES decides where set; set it to 1073741824 for what a user
    # who sizes nothing gets: libccl's default on GPUs, regions a quarter of it).
    heap = None if "CCL_HEAP_BYTES" in os.environ else max(1 << 30, 4 * max(a.sizes) + (256 << 20))
    if heap:  # regions as large as that heap, not libccl's quarter (CCL_REGION_BYTES decides where set)
        os.environ.setdefault("CCL_REGION_BYTES", str(heap))
    comm = ccl.init_rank(heap_bytes=heap)
    unavailable = {}  # kind -> why, the same on every rank
    rows = []
    for coll in a.colls:
        for nbytes in a.sizes:
            wrong = check(coll, comm, rank, n, nbytes, a.buffers, unavailable)
            row = {"collective": coll, "bytes": nbytes, "ranks": n,
                   "checked": "ok" if not wrong else "WRONG (" + ",".join(wrong) + ")"}
            time_ordinary(row, coll, comm, nbytes, n, "torch" in a.buffers, a)
            for kind in a.buffers:
                if kind != "torch":  # that one ran above, on NCCL's tensors
                    time_kind(row, kind, coll, comm, nbytes, n, a, unavailable)
            comm.synchronize()
            rows.append(row)
            if rank == 0:
                print(f"{coll} {nbytes}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if k.endswith("_us"))
                      + f" ({row['checked']})", flush=True)
    if rank == 0:
        for kind, why in unavailable.items():
            if kind != "sizes":
                print(f"--buffers {kind}: not timed: {why}", flush=True)
        for why in unavailable.get("sizes", []):
            print(f"not timed: {why}", flush=True)
        if a.csv:
            write_csv(a.csv, rows, a.buffers)
        title = (f"{n} ranks, {torch.cuda.get_device_name()}, bf16, us per call (max over ranks, median of "
                 f"{a.samples}); graph: {a.calls} calls captured, {a.replays} replays; eager: {a.calls} calls; "
                 f"NCCL on ordinary tensors (expandable segments {'on' if expandable_by_default() else 'off'}), "
                 f"CCL on --buffers {','.join(a.buffers)}")
        text = markdown(rows, a.buffers, a.colls, title, unavailable)
        print(text)
        if a.md:
            with open(a.md, "w") as f:
                f.write(text)
    comm.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
