"""One rank of a process-mode test (test_process.py starts N of these).

    python proc_worker.py MODE [ARGS]
    MODE env          ccl.init_rank() from the launcher's environment
    MODE store DIR R N  ccl.init_rank(R, N, store=ccl.FileStore(DIR))
    MODE mpi4py       ccl.init_rank(mpi_comm=MPI.COMM_WORLD) (under mpirun)
    MODE torchpg FILE R N   torch.distributed.init_process_group("gloo") through FILE,
                      then ccl.init_rank(process_group=True)
    MODE die          exits before init (the others must fail, not hang)

Runs every collective on numpy arrays (the dtypes i8, u32 and u64 too), a barrier and a
split, checks the results, prints "ok rank R" and exits 0;
on a ccl error prints "error CLASS: message" and exits 3."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: E402,F401 - sets the package path and CCL_ALGORITHM_DIR

import ccl  # noqa: E402


def main():
    mode = sys.argv[1]
    if mode == "die":
        sys.exit(0)
    try:
        if mode == "store":
            comm = ccl.init_rank(int(sys.argv[3]), int(sys.argv[4]), store=ccl.FileStore(sys.argv[2], timeout=30),
                                 backend="cpu")
        elif mode == "torchpg":
            import torch.distributed as dist

            dist.init_process_group("gloo", init_method=f"file://{sys.argv[2]}", rank=int(sys.argv[3]),
                                    world_size=int(sys.argv[4]))
            comm = ccl.init_rank(process_group=True, backend="cpu")
        elif mode == "mpi4py":
            from mpi4py import MPI

            comm = ccl.init_rank(mpi_comm=MPI.COMM_WORLD, backend="cpu")
        else:
            comm = ccl.init_rank(backend="cpu")
        r, n = comm.rank, comm.size
        x = np.full(1000, r + 1, np.float32)
        comm.all_reduce(x)
        assert (x == n * (n + 1) / 2).all(), x[:4]
        g = comm.all_gather(None, np.full(3, r, np.int64))
        assert (g == np.repeat(np.arange(n), 3)).all(), g
        s = comm.reduce_scatter(None, np.arange(2 * n, dtype=np.float64))
        assert (s == np.arange(2 * n)[2 * r:2 * r + 2] * n).all(), s
        a = comm.all_to_all(None, np.arange(n, dtype=np.int32) + 10 * r)
        assert (a == np.arange(n) * 10 + r).all(), a
        b = np.full(7, r, np.uint8)
        comm.broadcast(b, root=n - 1)
        assert (b == n - 1).all(), b
        y = comm.reduce(np.ones(5, np.float32), root=0, op="sum", out=np.zeros(5, np.float32))
        if r == 0:
            assert (y == n).all(), y
        e = comm.empty(64, np.float32)
        e[:] = r
        comm.all_reduce(e, "max")
        assert (e == n - 1).all()
        # The dtypes i8, u32, u64: signed and unsigned order, wrap-around.
        i8 = comm.all_reduce(np.array([-r - 1, 100], np.int8), "min", out=np.zeros(2, np.int8))
        assert list(i8) == [-n, 100], i8
        u32 = np.array([(1 << 31) + r, 1], np.uint32)
        comm.all_reduce(u32, "max")
        assert list(u32) == [(1 << 31) + n - 1, 1], u32
        u64 = comm.all_reduce(np.full(3, (1 << 64) - 1, np.uint64), "sum", out=np.zeros(3, np.uint64))
        assert (u64 == (1 << 64) - n).all(), u64
        # A barrier, then a split: ranks of one parity together, in reverse rank order; the
        # last rank joins none when there are more than two.
        comm.barrier()
        color = None if n > 2 and r == n - 1 else r % 2
        if mode == "mpi4py":
            from mpi4py import MPI

            comm.Barrier()
            u = np.array([r], np.uint32)
            comm.Allreduce(ccl.IN_PLACE, [u, MPI.UINT32_T], op=MPI.MAX)
            assert u[0] == n - 1, u
            sub = comm.Split(MPI.UNDEFINED if color is None else color, n - r)
        else:
            sub = comm.split(color, key=n - r)
        if color is None:
            assert sub is None, sub
        else:
            members = [p for p in range(n) if p % 2 == color and not (n > 2 and p == n - 1)]
            assert sub.size == len(members) and sub.rank == members[::-1].index(r), (sub.size, sub.rank, members)
            s_sum = sub.all_reduce(np.array([r], np.int64))
            assert s_sum[0] == sum(members), s_sum
            sub.barrier()
            sub.destroy()
        comm.destroy()
    except ccl.CclError as e:
        print(f"error {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
    print(f"ok rank {r}", flush=True)


if __name__ == "__main__":
    main()
