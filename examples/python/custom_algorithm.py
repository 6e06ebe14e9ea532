"""Your own CCL algorithm on tensors: prove it, load it, run it, check it against the
array library's own sum, then make the standard all_reduce use it for small messages.

    python examples/python/custom_algorithm.py [FILE.ccl] [--ranks 4] [--backend cpu|gpu]

FILE defaults to examples/star.ccl (an all-reduce through one hub rank). With torch the
tensors are torch tensors (CUDA ones on the GPU backend), else numpy arrays.
"""
import argparse
import os
import sys
import threading
from pathlib import Path

try:
    import torch
except ImportError:
    torch = None
try:
    import numpy as np
except ImportError:  # torch alone is enough
    np = None

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "python" / "src"))
import ccl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(HERE.parent / "star.ccl"))
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--count", type=int, default=100003)
    ap.add_argument("--backend", default=None)
    a = ap.parse_args()

    # 1. Prove it for this rank count, without a communicator (cclc check --explain).
    try:
        proof = ccl.check(a.file, ranks=a.ranks)
    except ccl.CompileError as e:  # the compiler's file:line:col diagnostics, with carets
        sys.exit(str(e))
    print(proof)

    backend = a.backend or ("auto" if torch is not None else "cpu")
    comms = ccl.init_all(a.ranks, backend=backend)
    gpu = comms[0].backend == "gpu"
    results = [None] * a.ranks

    def rank(r):
        c = comms[r]
        if gpu:
            torch.cuda.set_device(r % torch.cuda.device_count())
            torch.cuda.set_stream(torch.cuda.Stream())  # ranks sharing a GPU need their own streams
        # 2. Load it (compiled and proved again for this N; every rank, same order).
        alg = c.load(a.file)
        # 3. Run it on this rank's data; inputs differ per rank.
        if torch is not None:
            g = torch.Generator().manual_seed(r)
            x = torch.randint(-8, 8, (a.count,), generator=g).float().to("cuda" if gpu else "cpu")
            y = alg(x, out=torch.empty_like(x))
        else:
            x = np.random.default_rng(r).integers(-8, 8, a.count).astype(np.float32)
            y = alg(x, out=np.empty_like(x))
        # 4. Register it: the standard all_reduce now runs it up to 64 KiB.
        c.use(alg, 0, 64 << 10)
        small = x[:1000].clone() if torch is not None else x[:1000].copy()
        c.all_reduce(small)
        if gpu:
            torch.cuda.current_stream().synchronize()
        if torch is not None:  # to the host: ranks may be on different GPUs
            x, y, small = x.cpu(), y.cpu(), small.cpu()
        results[r] = (x, y, small, c.explain_choice())

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(a.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(res is None for res in results):
        sys.exit("a rank failed (its traceback is above)")

    # 5. Check against the library's own sum.
    if torch is not None:
        want = torch.stack([res[0] for res in results]).sum(0)
        ok = all(torch.equal(res[1], want) and torch.equal(res[2], want[:1000]) for res in results)
    else:
        want = np.stack([res[0] for res in results]).sum(0)
        ok = all(np.array_equal(res[1], want) and np.array_equal(res[2], want[:1000]) for res in results)
    print(f"ran {Path(a.file).name} on {a.ranks} ranks ({comms[0].backend}, {'torch' if torch else 'numpy'}), "
          f"count {a.count}: {'every element right' if ok else 'WRONG'}")
    print("explain_choice:", results[0][3])
    for c in comms:
        c.destroy()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
