"""Process mode: one Python process per rank, bootstrapped through the launcher's
environment (as under mpirun) or a store; a rank that never comes gives errors, not a
hang."""
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

WORKER = str(Path(__file__).with_name("proc_worker.py"))


def launch(n, argv_for, env_for, timeout=90):
    procs = []
    for r in range(n):
        env = dict(os.environ)
        env.update(env_for(r))
        procs.append(subprocess.Popen([sys.executable, WORKER] + argv_for(r), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a rank hung")
        outs.append((p.returncode, out))
    return outs


@pytest.mark.parametrize("n", [2, 3])
def test_env_bootstrap_like_mpirun(n):
    job = uuid.uuid4().hex
    outs = launch(n, lambda r: ["env"], lambda r: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(n),
                                                   "OMPI_COMM_WORLD_LOCAL_RANK": str(r), "CCL_JOB_ID": job})
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and f"ok rank {r}" in out, out


def test_store_bootstrap(tmp_path):
    outs = launch(2, lambda r: ["store", str(tmp_path / "store"), str(r), "2"], lambda r: {})
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and f"ok rank {r}" in out, out


def test_missing_rank_fails_without_hanging():
    job = uuid.uuid4().hex
    outs = launch(3, lambda r: ["die" if r == 2 else "env"],
                  lambda r: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "3", "CCL_JOB_ID": job,
                             "CCL_TIMEOUT_MS": "1500"})
    for rc, out in outs[:2]:
        assert rc != 0 and "Error" in out, out


def _env_ranks(n, job, **extra):
    return lambda r: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(n),
                      "OMPI_COMM_WORLD_LOCAL_RANK": str(r), "CCL_JOB_ID": job, **extra}


def _left_folder(job, owner_pid, owner_start):
    """The job folder a rank 0 leaves when it dies inside the bootstrap: its owner, the
    ready mark, and a key of that run."""
    folder = Path(tempfile.gettempdir()) / f"ccl-boot-{os.getuid()}-{job}"
    folder.mkdir(mode=0o700)
    (folder / "owner").write_text(f"{owner_pid} {owner_start}\n")
    (folder / "ready").write_bytes(b"")
    (folder / "boot%0%1").write_bytes(b"a key of the dead run")
    return folder


def test_job_folder_of_a_dead_rank_0_is_replaced():
    """A rank 0 killed inside the bootstrap leaves $TMPDIR/ccl-boot-UID-JOB behind: a rerun
    with the same job id replaces it (its owner is gone) instead of failing until someone
    removes it, reads none of its keys, and leaves no folder."""
    job = uuid.uuid4().hex
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folder = _left_folder(job, gone.pid, "1")  # a pid reused since has another start time
    outs = launch(2, lambda r: ["env"], _env_ranks(2, job))
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and f"ok rank {r}" in out, out
    assert not folder.exists()


def test_job_folder_of_a_running_rank_0_is_refused():
    """A folder whose owner still runs is another run's with this job id: refused."""
    job = uuid.uuid4().hex
    with open(f"/proc/{os.getpid()}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    folder = _left_folder(job, os.getpid(), start)
    try:
        outs = launch(2, lambda r: ["env"], _env_ranks(2, job, CCL_TIMEOUT_MS="1500"))
        assert outs[0][0] != 0 and "already exists" in outs[0][1], outs[0][1]
        assert outs[1][0] != 0, outs[1][1]
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def test_torch_process_group(tmp_path):
    pytest.importorskip("torch.distributed")
    outs = launch(2, lambda r: ["torchpg", str(tmp_path / "pg"), str(r), "2"], lambda r: {})
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and f"ok rank {r}" in out, out


def test_torchrun_environment():
    pytest.importorskip("torch.distributed")
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    outs = launch(2, lambda r: ["env"], lambda r: {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r),
                                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                                   "TORCHELASTIC_RUN_ID": "test"})
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and f"ok rank {r}" in out, out


@pytest.mark.parametrize("mode", ["env", "mpi4py"])
def test_under_mpirun(mode):
    import shutil

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun")
    if mode == "mpi4py":
        pytest.importorskip("mpi4py")
    flags = ["--oversubscribe"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
    p = subprocess.run([mpirun, "-np", "2"] + flags + [sys.executable, WORKER, mode], capture_output=True,
                       text=True, timeout=120,
                       env=dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1"))
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "ok rank 0" in out and "ok rank 1" in out, out
