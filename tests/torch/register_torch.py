"""register_torch.py: PyTorch's own tensors registered (comm.register) and pool tensors
(ccl.torch.mem_pool), on GPUs: every value checked, and the calls' trace lines
(CCL_DEBUG=TRACE) checked for staging copies (none on registered memory).

    torchrun --standalone --nproc-per-node 2 tests/torch/register_torch.py   # a process per GPU
    python tests/torch/register_torch.py --threads 2                        # one process, a thread per GPU

with the package importable (PYTHONPATH=python/src) and CCL_LIBRARY=build/libccl.so;
tests/run-gpu.sh runs both where there are 2 GPUs and torch. It turns on torch's
expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) unless the
environment says otherwise, before CUDA starts. Per rank:
  - a tensor from torch's caching allocator (expandable segments), registered: all-reduce
    through allreduce/ring (which writes peers' outputs) out of place and in place, the
    standard all-reduce in place, all-gather into it; exact values, no staging; then,
    deregistered, the same ring call stages (so the trace check can see staging);
  - tensors made under ccl.torch.mem_pool(comm): the same, zero-copy, and all_reduce_;
  - a tensor from torch's allocator without expandable segments (cudaMalloc memory):
    comm.register raises, saying what to set.
Prints "ok torch-register/MODE/CASE" (rank 0) or "FAIL torch-register/...: rank R: why"
(any rank); exits 1 on a failure."""
import os
import sys
import tempfile
import threading
from pathlib import Path

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
LOG = os.path.join(tempfile.gettempdir(), f"ccl-register-torch-{os.getppid()}-%p.log")
os.environ.update(CCL_DEBUG="TRACE", CCL_DEBUG_SUBSYS="CALL", CCL_DEBUG_FILE=LOG)
ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("CCL_ALGORITHM_DIR", str(ROOT / "algorithms"))

import torch  # noqa: E402

import ccl  # noqa: E402
import ccl.torch as cclt  # noqa: E402

M = 1 << 22                           # floats per half of the registered tensor (16 MB)
failures = []


class Rank:
    def __init__(self, comm, mode):
        self.comm, self.rank, self.n, self.mode = comm, comm.rank, comm.size, mode
        self.log = LOG.replace("%p", str(os.getpid()))
        self.off = 0

    def say(self, ok, name, why=""):
        if ok and self.rank == 0:
            print(f"ok torch-register/{self.mode}/N{self.n}/{name}", flush=True)
        if not ok:
            print(f"FAIL torch-register/{self.mode}/N{self.n}/{name}: rank {self.rank}: {why}", flush=True)
            failures.append(name)

    def trace(self):
        """This rank's call lines since the last look: (calls, staged, registered)."""
        try:
            with open(self.log) as f:
                f.seek(self.off)
                text = f.read()
                self.off = f.tell()
        except OSError:
            return 0, 0, 0
        mine = [ln for ln in text.splitlines() if f" rank {self.rank} [call]: call " in ln]
        return (len(mine), sum("staging" in ln for ln in mine), sum("registered" in ln for ln in mine))

    def check(self, name, got, want, zero_copy):
        torch.cuda.synchronize()
        calls, staged, registered = self.trace()
        if not torch.equal(got, want):
            bad = (got != want).nonzero()[0].item()
            self.say(False, name, f"element {bad} is {got[bad].item()}, expected {want[bad].item()}")
        elif calls == 0:
            self.say(False, name, f"no trace line of the call in {self.log}")
        elif zero_copy and staged:
            self.say(False, name, f"registered memory was staged ({staged} of {calls} calls)")
        elif zero_copy is False and not staged:
            self.say(False, name, "unregistered memory was not staged: the trace check cannot see staging")
        else:
            self.say(True, name)


def body(comm, mode):
    k = Rank(comm, mode)
    r, n = k.rank, k.n
    torch.cuda.set_device(r % torch.cuda.device_count())
    ring = comm.load(str(ROOT / "algorithms" / "allreduce" / "ring.ccl"))
    total = float(n * (n + 1) // 2)
    k.trace()

    # torch's caching allocator, expandable segments: one tensor, two halves.
    buf = torch.empty(2 * M, device="cuda")
    x, y = buf[:M], buf[M:]
    try:
        reg = comm.register(buf)
    except ccl.CclError as e:
        k.say(False, "expandable-segments/register", str(e))
        return
    with reg:
        x.fill_(r + 1)
        ring(x, out=y)
        k.check("expandable-segments/ring/out-of-place", y, torch.full_like(y, total), True)
        x.fill_(r + 1)
        ring(x)
        k.check("expandable-segments/ring/in-place", x, torch.full_like(x, total), True)
        x.fill_(r + 1)
        cclt.all_reduce_(x, comm)
        k.check("expandable-segments/all_reduce_", x, torch.full_like(x, total), None)
        part = x[:1000]
        part.fill_(r)
        comm.all_gather(y[: n * 1000], part)
        k.check("expandable-segments/all_gather", y[: n * 1000], torch.arange(n, device="cuda").float()
                .repeat_interleave(1000), None)
    x.fill_(r + 1)
    ring(x, out=y)
    k.check("deregistered/ring/out-of-place-stages", y, torch.full_like(y, total), False)

    # The pool.
    try:
        with cclt.mem_pool(comm):
            z = torch.full((M,), float(r + 1), device="cuda")
            w = torch.empty_like(z)
    except (ccl.CclError, RuntimeError) as e:
        k.say(False, "mem_pool/allocate", f"{type(e).__name__}: {e}")
        return
    ring(z, out=w)
    k.check("mem_pool/ring/out-of-place", w, torch.full_like(w, total), True)
    cclt.all_reduce_(z, comm)
    k.check("mem_pool/all_reduce_", z, torch.full_like(z, total), None)

    # cudaMalloc memory: refused, saying what to do.
    setter = getattr(torch.cuda.memory, "_set_allocator_settings", None)
    if setter is None:
        k.say(True, "refused/cudaMalloc (skipped: torch has no _set_allocator_settings)")
    else:
        setter("expandable_segments:False")
        plain = torch.empty(1 << 20, device="cuda")
        setter("expandable_segments:True")
        try:
            comm.register(plain).deregister()
            k.say(False, "refused/cudaMalloc", "registered")
        except ccl.InvalidArgumentError as e:
            msg = str(e)
            k.say("expandable_segments:True" in msg and "cudaMalloc" in msg, "refused/cudaMalloc", msg)
    comm.synchronize()


def main():
    if not torch.cuda.is_available():
        print("skipped: no CUDA GPU")
        return 0
    if "--threads" in sys.argv:
        n = int(sys.argv[sys.argv.index("--threads") + 1])
        if torch.cuda.device_count() < n:
            print(f"skipped: {n} ranks need {n} GPUs, this machine has {torch.cuda.device_count()}")
            return 0
        comms = ccl.init_all(n, backend="gpu", devices=list(range(n)), timeout_ms=120000)
        errors = []

        def run(c):
            try:
                body(c, "threads")
            except BaseException as e:  # noqa: BLE001
                errors.append(f"rank {c.rank}: {type(e).__name__}: {e}")

        ts = [threading.Thread(target=run, args=(c,)) for c in comms]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for e in errors:
            print(f"FAIL torch-register/threads/N{n}: {e}")
        for c in comms:
            c.destroy()
        return 1 if failures or errors else 0
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    comm = ccl.init_rank(backend="gpu", timeout_ms=120000)
    body(comm, "procs")
    comm.destroy()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
