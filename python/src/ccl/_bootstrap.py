"""Bootstraps for one process per rank, written in Python over what the launcher offers.

libccl needs, only while ``ccl_comm_init_rank`` runs, an all-gather of a few bytes and a
barrier among the processes (``ccl_bootstrap_t``). Each class here provides them:

- :class:`StoreBootstrap`: over a key-value store with ``set(key, bytes)`` and a blocking
  ``get(key)`` -- torch.distributed's ``TCPStore``/``FileStore``/``PrefixStore`` or
  :class:`FileStore` below;
- :class:`MPIBootstrap`: over an mpi4py communicator;
- :class:`GroupBootstrap`: over a torch.distributed process group's object collectives.

Every wait is bounded (the store's timeout, or ours), so a missing rank gives an error,
never a hang.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Optional

from ._lib import ALLGATHER_FN, BARRIER_FN, ccl_bootstrap_t


class Bootstrap:
    """An all-gather of bytes and a barrier among ``nranks`` processes."""

    rank: int
    nranks: int

    def allgather(self, data: bytes) -> list[bytes]:
        raise NotImplementedError

    def barrier(self) -> None:
        self.allgather(b"")

    def close(self) -> None:
        """Called on every rank once the communicator exists (or failed)."""

    def as_c(self) -> tuple[ccl_bootstrap_t, list[BaseException], tuple[Any, ...]]:
        """The C struct, a list that collects exceptions raised inside the callbacks, and
        the callback objects to keep alive while the struct is in use."""
        errors: list[BaseException] = []

        def c_allgather(ctx: int, inp: int, out: int, nbytes: int) -> int:
            try:
                parts = self.allgather(ctypes.string_at(inp, nbytes) if nbytes else b"")
                if len(parts) != self.nranks or any(len(p) != nbytes for p in parts):
                    raise RuntimeError(f"bootstrap all-gather returned {[len(p) for p in parts]} bytes per rank, "
                                       f"expected {self.nranks} x {nbytes}")
                ctypes.memmove(out, b"".join(parts), nbytes * self.nranks)
                return 0
            except BaseException as e:  # noqa: BLE001 - reported after the C call returns
                errors.append(e)
                return -1

        def c_barrier(ctx: int) -> int:
            try:
                self.barrier()
                return 0
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return -1

        ag, br = ALLGATHER_FN(c_allgather), BARRIER_FN(c_barrier)
        c = ccl_bootstrap_t(nranks=self.nranks, rank=self.rank, allgather=ag, barrier=br, ctx=None)
        return c, errors, (ag, br)


class StoreBootstrap(Bootstrap):
    """All-gather and barrier through a key-value store: every rank sets its key, then gets
    every rank's key (``get`` blocks until the key exists, up to the store's timeout)."""

    def __init__(self, store: Any, rank: int, nranks: int, prefix: str = "ccl"):
        self.store, self.rank, self.nranks, self.prefix = store, rank, nranks, prefix
        self._round = 0

    def allgather(self, data: bytes) -> list[bytes]:
        r = self._round
        self._round += 1
        self.store.set(f"{self.prefix}/{r}/{self.rank}", data)
        return [bytes(self.store.get(f"{self.prefix}/{r}/{i}")) for i in range(self.nranks)]


class MPIBootstrap(Bootstrap):
    """Over an mpi4py communicator (``MPI.COMM_WORLD`` or any intra-communicator)."""

    def __init__(self, comm: Any):
        self.comm = comm
        self.rank, self.nranks = comm.Get_rank(), comm.Get_size()

    def allgather(self, data: bytes) -> list[bytes]:
        return list(self.comm.allgather(data))

    def barrier(self) -> None:
        self.comm.Barrier()


class GroupBootstrap(Bootstrap):
    """Over a torch.distributed process group (its object all-gather and barrier)."""

    def __init__(self, group: Any = None):
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.rank, self.nranks = dist.get_rank(group), dist.get_world_size(group)

    def allgather(self, data: bytes) -> list[bytes]:
        out: list[Any] = [None] * self.nranks
        self.dist.all_gather_object(out, data, group=self.group)
        return out

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)


class FileStore:
    """A key-value store in a folder that every rank of one host can reach (the CPU
    backend's process mode is one host anyway): ``set`` writes a file atomically, ``get``
    waits for it, at most ``timeout`` seconds (default: 10 minutes, libccl's default bound
    on a wait, so a rank that comes late to the init is waited for as long as a late
    rank of a collective). torch.distributed's stores work as well; this one needs
    nothing but the standard library."""

    def __init__(self, path: str, timeout: float = 600.0):
        self.path, self.timeout = path, timeout
        os.makedirs(path, mode=0o700, exist_ok=True)

    def _file(self, key: str) -> str:
        return os.path.join(self.path, key.replace("/", "%"))

    def set(self, key: str, value: bytes) -> None:
        tmp = self._file(key) + f".tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(value)
        os.replace(tmp, self._file(key))

    def get(self, key: str) -> bytes:
        deadline = time.monotonic() + self.timeout
        delay = 0.0005
        while True:
            try:
                with open(self._file(key), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"ccl.FileStore({self.path!r}): key '{key}' did not appear within "
                                       f"{self.timeout:g} s (is every rank running, with the same job id?)") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.02)


def _process_start(pid: int) -> Optional[str]:
    """When process pid (of this host) started, in clock ticks since boot; None when it
    is gone (no such process, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _owner_alive(folder: str) -> Optional[bool]:
    """Whether the rank 0 that made a job folder (its ``owner`` file: pid and start time)
    still runs; None when the folder has no readable owner."""
    try:
        with open(os.path.join(folder, "owner")) as f:
            pid, start = f.read().split()
        return _process_start(int(pid)) == start
    except (OSError, ValueError):
        return None


class JobFolderBootstrap(StoreBootstrap):
    """The launcher-environment bootstrap without torch or mpi4py: a :class:`FileStore` in
    a folder named after the user and the job (``$TMPDIR/ccl-boot-UID-JOB``). Rank 0 makes
    the folder whole (filled under another name, with an ``owner`` file naming its pid and
    start time, then renamed into place) and removes it once every rank is done with it.
    A folder left by a rank 0 that died (its owner no longer runs: a crashed run with the
    same job id) is removed and made again, and the other ranks use a folder only while its
    owner runs, so a rerun never reads a dead run's keys; one whose owner runs (another
    run with this job id) or that has no owner is refused."""

    def __init__(self, rank: int, nranks: int, job: str, timeout: float):
        safe = "".join(c if c.isalnum() else "_" for c in job)
        self.folder = os.path.join(tempfile.gettempdir(), f"ccl-boot-{os.getuid()}-{safe}")
        self.timeout = timeout
        ready = os.path.join(self.folder, "ready")
        if rank == 0:
            self._make_folder()
        else:
            deadline = time.monotonic() + timeout
            while not (os.path.exists(ready) and _owner_alive(self.folder)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"bootstrap: rank 0 did not make {self.folder} within {timeout:g} s (is it "
                                       "running, with the same job id?)")
                time.sleep(0.002)
            st = os.stat(self.folder)
            if st.st_uid != os.getuid() or (st.st_mode & 0o777) != 0o700:
                raise RuntimeError(f"bootstrap folder {self.folder} is not this user's with mode 700: not used")
        super().__init__(FileStore(self.folder, timeout), rank, nranks, prefix="boot")

    def _make_folder(self) -> None:
        start = _process_start(os.getpid())
        made = tempfile.mkdtemp(prefix=os.path.basename(self.folder) + ".new-", dir=os.path.dirname(self.folder))
        try:
            with open(os.path.join(made, "owner"), "w") as f:
                f.write(f"{os.getpid()} {start}\n")
            open(os.path.join(made, "ready"), "wb").close()
            for attempt in range(2):
                try:
                    os.rename(made, self.folder)  # fails while a folder of that name exists
                    return
                except OSError:
                    if attempt or not self._remove_stale():
                        raise RuntimeError(f"bootstrap folder {self.folder} already exists (another run with this job "
                                           "id is using it, or someone else made it): not used. Remove it, or set "
                                           "CCL_JOB_ID to a fresh value") from None
        finally:
            shutil.rmtree(made, ignore_errors=True)

    def _remove_stale(self) -> bool:
        """Removes the folder when it is this user's and its owner is gone: True."""
        try:
            st = os.lstat(self.folder)
        except OSError:
            return True  # gone since
        if st.st_uid != os.getuid() or (st.st_mode & 0o7777) != 0o700 or not os.path.isdir(self.folder):
            return False
        if _owner_alive(self.folder) is not False:
            return False
        shutil.rmtree(self.folder, ignore_errors=True)
        return not os.path.exists(self.folder)

    def close(self) -> None:
        try:
            self.store.set(f"done/{self.rank}", b"")
        except OSError:
            return
        if self.rank != 0:
            return
        deadline = time.monotonic() + self.timeout
        for r in range(self.nranks):
            while not os.path.exists(self.store._file(f"done/{r}")) and time.monotonic() < deadline:
                time.sleep(0.002)
        shutil.rmtree(self.folder, ignore_errors=True)


def launcher_env() -> Optional[tuple[int, int, int, str]]:
    """(rank, nranks, local rank or -1, job id) from torchrun's, Open MPI's, PMI's or
    Slurm's environment; None outside a launcher."""
    e = os.environ
    pairs = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
             ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
             ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
             ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))
    for r, s, lr in pairs:
        if e.get(r) and e.get(s):
            rank, size = int(e[r]), int(e[s])
            local = int(e[lr]) if e.get(lr) else -1
            job = (e.get("CCL_JOB_ID") or e.get("PMIX_NAMESPACE") or e.get("OMPI_MCA_ess_base_jobid") or
                   (f"{e['SLURM_JOB_ID']}.{e.get('SLURM_STEP_ID', '0')}" if e.get("SLURM_JOB_ID") else "") or
                   (f"torchrun-{e.get('MASTER_PORT', '')}-{e.get('TORCHELASTIC_RUN_ID', '')}-"
                    f"{e.get('TORCHELASTIC_RESTART_COUNT', '0')}" if e.get("MASTER_PORT") else ""))
            return rank, size, local, job
    return None


Factory = Callable[[], Bootstrap]
