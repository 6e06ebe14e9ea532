"""Top-k sparse all-reduce, ported from mpi4py to ccl (gradient compression as in Deep
Gradient Compression): each rank keeps the k largest-magnitude entries of its gradient,
the ranks exchange them, and every rank accumulates all of them into a dense result; the
part left out stays in a local residual for the next step. A dense all_reduce of the same
sparse vectors checks the result. Two ways to exchange (--method):
  gather: all_gather of the values and of the indices (every rank sends k of each);
  tree:   a binary tree of grouped send/recv (comm.send, comm.recv in ccl.group()): each
          rank passes the pairs it holds to its parent, the size first, then the root's
          collection goes back down the same edges.

    python examples/python/topk_allreduce.py [--ranks 4] [--n 100000] [--k 1000] [--method tree]
                                                   # threads: every rank in this process
    mpirun -np 4 python examples/python/topk_allreduce.py   # or torchrun --nproc-per-node 4
                                                   # one process per rank

With torch it runs on torch tensors (CUDA ones where the GPU backend runs, the top-k and
the accumulation on the GPU); without torch, on numpy arrays on the CPU backend. The mpi4py
original, for comparison:

    comm.Allreduce(MPI.IN_PLACE, dense, op=MPI.SUM)
    vals, idx = topk(grad, k)
    all_vals = np.empty(k * size); comm.Allgather(vals, all_vals)
    all_idx = np.empty(k * size, np.int64); comm.Allgather(idx, all_idx)
    np.add.at(out, all_idx, all_vals)
"""
import argparse
import os
import sys
import threading

try:
    import torch
except ImportError:
    torch = None
try:
    import numpy as np
except ImportError:  # torch alone is enough
    np = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "src"))
import ccl  # noqa: E402


class Arrays:
    """The few array operations the algorithm needs, on torch (CPU or CUDA) or numpy."""

    def __init__(self, comm):
        self.torch = torch is not None
        self.device = "cuda" if comm.backend == "gpu" else "cpu"

    def randn(self, n, seed):
        if self.torch:
            g = torch.Generator().manual_seed(seed)
            return torch.randn(n, generator=g).to(self.device)
        return np.random.default_rng(seed).standard_normal(n).astype(np.float32)

    def topk(self, x, k):
        if self.torch:
            idx = torch.topk(x.abs(), k).indices
            return x[idx].contiguous(), idx.to(torch.int64)
        idx = np.argpartition(-np.abs(x), k - 1)[:k].astype(np.int64)
        return x[idx].copy(), idx

    def zeros_like(self, x):
        return torch.zeros_like(x) if self.torch else np.zeros_like(x)

    def empty_like(self, x, n):
        return torch.empty(n, dtype=x.dtype, device=x.device) if self.torch else np.empty(n, dtype=x.dtype)

    def cat(self, a, b):
        return torch.cat([a, b]) if self.torch else np.concatenate([a, b])

    def scatter_add(self, out, idx, vals):
        if self.torch:
            out.index_add_(0, idx, vals)
        else:
            np.add.at(out, idx, vals)

    def max_abs_diff(self, a, b):
        return float((a - b).abs().max()) if self.torch else float(np.abs(a - b).max())


def sparse_allreduce(comm, grad, k, arr):
    """The top-k all-reduce of grad; returns (result, residual)."""
    vals, idx = arr.topk(grad, k)
    all_vals = comm.all_gather(None, vals)         # k * size values, rank order
    all_idx = comm.all_gather(None, idx)           # and their indices
    out = arr.zeros_like(grad)
    arr.scatter_add(out, all_idx, all_vals)        # accumulation (on the GPU with CUDA tensors)
    residual = grad.copy() if not arr.torch else grad.clone()
    residual[idx] = 0
    return out, residual


def tree_exchange(comm, vals, idx, arr):
    """Every rank's (vals, idx) pairs, on every rank, through a binary tree of grouped
    send/recv: up, a rank at distance s (r % 2s == s) sends its pairs to r - s, which
    appends them to its own; down, the root's collection goes back the same edges."""
    r, n = comm.rank, comm.size
    size = arr.empty_like(idx, 1)

    def send_pairs(to):
        size[0] = vals.shape[0]
        with ccl.group():
            comm.send(size, to)
        with ccl.group():
            comm.send(vals, to)
            comm.send(idx, to)

    def recv_pairs(frm):
        with ccl.group():
            comm.recv(size, frm)
        got_vals, got_idx = arr.empty_like(vals, int(size[0])), arr.empty_like(idx, int(size[0]))
        with ccl.group():
            comm.recv(got_vals, frm)
            comm.recv(got_idx, frm)
        return got_vals, got_idx

    s = 1
    while s < n:
        if r % (2 * s) == s:
            send_pairs(r - s)
        elif r % (2 * s) == 0 and r + s < n:
            got_vals, got_idx = recv_pairs(r + s)
            vals, idx = arr.cat(vals, got_vals), arr.cat(idx, got_idx)
        s *= 2
    while s > 1:
        s //= 2
        if r % (2 * s) == 0 and r + s < n:
            send_pairs(r + s)
        elif r % (2 * s) == s:
            vals, idx = recv_pairs(r - s)
    return vals, idx


def sparse_allreduce_tree(comm, grad, k, arr):
    """The top-k all-reduce of grad through tree_exchange; returns (result, residual)."""
    vals, idx = arr.topk(grad, k)
    all_vals, all_idx = tree_exchange(comm, vals, idx, arr)
    out = arr.zeros_like(grad)
    arr.scatter_add(out, all_idx, all_vals)
    residual = grad.copy() if not arr.torch else grad.clone()
    residual[idx] = 0
    return out, residual


def run_rank(comm, n, k, method="gather", steps=3):
    arr = Arrays(comm)
    residual = arr.zeros_like(arr.randn(n, 0))
    exchange = sparse_allreduce_tree if method == "tree" else sparse_allreduce
    for step in range(steps):
        grad = arr.randn(n, 1000 * step + comm.rank) + residual
        out, residual = exchange(comm, grad, k, arr)
        # Check: the same sparse vectors, reduced densely.
        dense = grad - residual
        comm.all_reduce(dense)
        if arr.torch and comm.backend == "gpu":
            torch.cuda.synchronize()
        err = arr.max_abs_diff(out, dense)
        assert err < 1e-4, f"rank {comm.rank} step {step}: sparse and dense results differ by {err}"
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--backend", default=None, help="cpu or gpu (default: CCL_BACKEND, else auto)")
    ap.add_argument("--method", choices=("gather", "tree"), default="gather",
                    help="all_gather of the pairs, or a tree of grouped send/recv")
    a = ap.parse_args()
    backend = a.backend or ("auto" if torch is not None else "cpu")
    if ccl._bootstrap.launcher_env() is not None:  # mpirun / torchrun: one process per rank
        local = int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
        if torch is not None and torch.cuda.is_available() and backend != "cpu":
            torch.cuda.set_device(local % torch.cuda.device_count())
        comm = ccl.init_rank(backend=backend)
        err = run_rank(comm, a.n, a.k, a.method)
        if comm.rank == 0:
            print(f"top-k all-reduce ({a.method}): {comm.size} processes, n={a.n}, k={a.k}, {comm.backend}: ok (max diff {err:g})")
        comm.destroy()
        return
    comms = ccl.init_all(a.ranks, backend=backend)
    errs = [None] * a.ranks

    def body(r):
        if comms[r].backend == "gpu":
            torch.cuda.set_device(r % torch.cuda.device_count())
            with torch.cuda.stream(torch.cuda.Stream()):  # ranks sharing a GPU need their own streams
                errs[r] = run_rank(comms[r], a.n, a.k, a.method)
        else:
            errs[r] = run_rank(comms[r], a.n, a.k, a.method)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(a.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(e is None for e in errs):
        sys.exit("a rank failed (its traceback is above)")
    lib = "torch" if torch is not None else "numpy"
    print(f"top-k all-reduce ({a.method}): {a.ranks} ranks (threads), n={a.n}, k={a.k}, {comms[0].backend}, {lib}: ok "
          f"(max diff {max(errs):g})")
    for c in comms:
        c.destroy()


if __name__ == "__main__":
    main()
