"""One rank of a communicator made from a unique id (test_uniqueid.py starts N of these).

    python uid_worker.py RANK NRANKS RANKS_PER_NODE HOW

Rank 0 (HOW "make") calls ccl.get_unique_id() and prints it first, as "uid HEX"; the
others read it from stdin as HOW says: "bytes" the id's 128 raw bytes, "pickle" a pickled
ccl.UniqueId. Every rank then calls ccl.init_rank(RANK, NRANKS, unique_id=uid,
ranks_per_node=RANKS_PER_NODE, backend="cpu") and, on counts 1, 1001 and 65539, runs
all_reduce (f32 sum, i32 max, f64 min; out of place and in place), all_gather (f32, i32;
out of place and in place), reduce_scatter (f32 sum), all_to_all (i32), broadcast from
every root (f32, i32; in place and into out), reduce to every root (f32 sum) and a
barrier, every element of every output compared with what the rank computes itself.

Prints "ok rank R: N cases" and exits 0; "wrong rank R: CASE: ..." (exit 1) at the first
wrong element; "error CLASS: message" (exit 3) on a ccl error."""
import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: E402,F401 - sets the package path and CCL_ALGORITHM_DIR

import ccl  # noqa: E402

COUNTS = (1, 1001, 65539)


def values(rank, count, dtype, salt=0):
    """Rank rank's input: exact in every dtype used, different per rank and element."""
    return ((np.arange(count) * 7 + salt) % 251 + 1000 * rank).astype(dtype)


class Wrong(Exception):
    pass


def same(case, got, want):
    if got.shape != want.shape:
        raise Wrong(f"{case}: shape {got.shape}, expected {want.shape}")
    bad = np.flatnonzero(got != want)
    if len(bad):
        raise Wrong(f"{case}: {len(bad)} wrong elements, the first at {bad[0]}: {got[bad[0]]}, expected "
                    f"{want[bad[0]]}")


def run_cases(comm):
    r, n = comm.rank, comm.size
    cases = 0
    for count in COUNTS:
        for dt, op, fold in ((np.float32, "sum", np.sum), (np.int32, "max", np.max), (np.float64, "min", np.min)):
            ins = [values(p, count, dt, salt=3) for p in range(n)]
            want = fold(np.stack(ins), axis=0).astype(dt)
            same(f"all_reduce {op} {np.dtype(dt).name} count {count} out of place",
                 comm.all_reduce(ins[r].copy(), op, out=np.zeros(count, dt)), want)
            x = ins[r].copy()
            comm.all_reduce(x, op)
            same(f"all_reduce {op} {np.dtype(dt).name} count {count} in place", x, want)
            cases += 2
        for dt in (np.float32, np.int32):
            want = np.concatenate([values(p, count, dt) for p in range(n)])
            same(f"all_gather {np.dtype(dt).name} count {count} out of place",
                 comm.all_gather(np.zeros(n * count, dt), values(r, count, dt)), want)
            buf = np.zeros(n * count, dt)
            buf[r * count:(r + 1) * count] = values(r, count, dt)
            comm.all_gather(buf)
            same(f"all_gather {np.dtype(dt).name} count {count} in place", buf, want)
            cases += 2
        ins = [values(p, n * count, np.float32, salt=5) for p in range(n)]
        want = np.sum(np.stack(ins), axis=0)[r * count:(r + 1) * count]
        same(f"reduce_scatter sum float32 count {count}", comm.reduce_scatter(np.zeros(count, np.float32), ins[r]),
             want)
        mine = values(r, n * count, np.int32, salt=1)
        want = np.concatenate([values(p, n * count, np.int32, salt=1)[r * count:(r + 1) * count] for p in range(n)])
        same(f"all_to_all int32 count {count}", comm.all_to_all(np.zeros(n * count, np.int32), mine), want)
        cases += 2
        for root in range(n):
            for dt in (np.float32, np.int32):
                want = values(root, count, dt, salt=root)
                x = values(r, count, dt, salt=root) if r == root else np.zeros(count, dt)
                comm.broadcast(x, root=root)
                same(f"broadcast {np.dtype(dt).name} root {root} count {count} in place", x, want)
                out = comm.broadcast(values(r, count, dt, salt=root), root=root, out=np.zeros(count, dt))
                same(f"broadcast {np.dtype(dt).name} root {root} count {count} into out", out, want)
                cases += 2
            ins = [values(p, count, np.float32, salt=root) for p in range(n)]
            out = np.full(count, -1, np.float32)
            comm.reduce(ins[r], root=root, op="sum", out=out)
            if r == root:
                same(f"reduce sum float32 root {root} count {count}", out, np.sum(np.stack(ins), axis=0))
            cases += 1
        comm.barrier()
        cases += 1
    return cases


def main():
    rank, nranks, rpn = (int(a) for a in sys.argv[1:4])
    how = sys.argv[4]
    if how == "make":
        uid = ccl.get_unique_id()
        print(f"uid {bytes(uid).hex()}", flush=True)
    elif how == "bytes":
        uid = ccl.UniqueId(sys.stdin.buffer.read(ccl.UNIQUE_ID_BYTES))
    else:
        uid = pickle.loads(sys.stdin.buffer.read())
        assert isinstance(uid, ccl.UniqueId), type(uid)
    try:
        comm = ccl.init_rank(rank, nranks, unique_id=uid, ranks_per_node=rpn, backend="cpu")
        assert (comm.rank, comm.size, comm.backend) == (rank, nranks, "cpu"), (comm.rank, comm.size, comm.backend)
        cases = run_cases(comm)
        comm.destroy()
    except ccl.CclError as e:
        print(f"error {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
    except Wrong as e:
        print(f"wrong rank {rank}: {e}", flush=True)
        sys.exit(1)
    print(f"ok rank {rank}: {cases} cases", flush=True)


if __name__ == "__main__":
    main()
