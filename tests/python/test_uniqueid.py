"""Communicators from a unique id (ccl.get_unique_id, ccl.init_rank(unique_id=...); libccl's
TCP bootstrap, docs/multinode.md): the id's bytes and pickle; 4 processes as 2 nodes of 2,
4 of 1 and 1 of 4 (CPU backend; rank 0 makes the id, the others get it through a pipe),
every element of every collective checked; and the failures: a damaged id, an id libccl
did not make, a rank out of range, a rank that never comes, a root address that names
nothing; and docs/python.md's program for several nodes. Every wait is bounded
(CCL_TIMEOUT_MS, the processes' join timeout)."""
import os
import pickle
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ccl

WORKER = str(Path(__file__).with_name("uid_worker.py"))
# The C test's environment (tests/uniqueid/run.sh): where the root listens and the node
# layout come from the arguments, not from the caller's shell.
_CLEAN = ("CCL_BOOTSTRAP_ADDR", "CCL_SOCKET_IFNAME", "CCL_RANKS_PER_NODE")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN}
    env.update(extra)
    return env


def launch(nranks, rpn, how=lambda r: "bytes", start=None, timeout=60, **env):
    """Rank 0 makes the id and prints it; the test hands it to ranks ``start`` (default:
    all the others) through their stdin, as bytes or pickled (``how(rank)``). Returns each
    started rank's (exit code, output), in rank order."""
    start = range(1, nranks) if start is None else start
    e = _env(**env)
    procs = [subprocess.Popen([sys.executable, WORKER, "0", str(nranks), str(rpn), "make"], env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)]
    try:
        # Rank 0's output up to its "uid HEX" line (log lines may come first with
        # CCL_DEBUG), read from the pipe itself so that every wait is bounded.
        before, fd, deadline = b"", procs[0].stdout.fileno(), time.monotonic() + timeout
        while not re.search(rb"^uid [0-9a-f]+\n", before, re.M):
            if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise subprocess.TimeoutExpired(procs[0].args, timeout)
            chunk = os.read(fd, 65536)
            assert chunk, (before + b"(rank 0 exited before it printed the id)").decode()
            before += chunk
        uid = ccl.UniqueId.fromhex(re.search(rb"^uid ([0-9a-f]+)\n", before, re.M).group(1).decode())
        for r in start:
            rd, wr = os.pipe()  # the id fits a pipe's buffer: written whole before the rank starts
            os.write(wr, bytes(uid) if how(r) == "bytes" else pickle.dumps(uid))
            os.close(wr)
            try:
                procs.append(subprocess.Popen([sys.executable, WORKER, str(r), str(nranks), str(rpn), how(r)], env=e,
                                              stdin=rd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            finally:
                os.close(rd)
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outs.append((p.returncode, ((before if p is procs[0] else b"") + out).decode()))
        return outs
    except subprocess.TimeoutExpired:
        pytest.fail(f"a rank did not finish within {timeout} s (hang)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# ---- the id as a value ----

def test_id_bytes_hex_and_pickle_round_trip():
    uid = ccl.get_unique_id()
    data = bytes(uid)
    assert isinstance(data, bytes) and len(data) == ccl.UNIQUE_ID_BYTES == 128
    assert ccl.UniqueId(data) == uid and hash(ccl.UniqueId(data)) == hash(uid)
    assert ccl.UniqueId(bytearray(data)) == ccl.UniqueId(memoryview(data)) == ccl.UniqueId(uid) == uid
    assert ccl.UniqueId.fromhex(uid.hex()) == uid and len(uid.hex()) == 256
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(uid, protocol=proto))
        assert isinstance(back, ccl.UniqueId) and back == uid and bytes(back) == data
    assert ccl.get_unique_id() != uid  # another root: another port or cookie
    assert uid != data  # an id is not its bytes (compare bytes(uid))
    assert data.hex() not in repr(uid) and "128 bytes" in repr(uid)  # the cookie stays out of logs


def test_id_of_the_wrong_size_or_type():
    with pytest.raises(ccl.InvalidArgumentError, match=r"ccl.UniqueId: 127 bytes, expected 128"):
        ccl.UniqueId(bytes(127))
    with pytest.raises(TypeError, match=r"not str; for hex text use ccl.UniqueId.fromhex"):
        ccl.UniqueId("00" * 128)
    with pytest.raises(TypeError, match=r"not int"):
        ccl.UniqueId(128)
    with pytest.raises(ccl.InvalidArgumentError, match=r"ccl.UniqueId.fromhex: not hex text"):
        ccl.UniqueId.fromhex("zz" * 128)


# ---- communicators ----

def test_one_rank_in_this_process():
    comm = ccl.init_rank(0, 1, unique_id=ccl.get_unique_id(), backend="cpu")
    try:
        assert (comm.rank, comm.size, comm.backend) == (0, 1, "cpu")
        x = np.arange(10, dtype=np.float32)
        comm.all_reduce(x)
        assert np.array_equal(x, np.arange(10, dtype=np.float32))
    finally:
        comm.destroy()


@pytest.mark.parametrize("nodes,rpn", [(2, 2), (4, 1), (1, 4)], ids=["2x2", "4x1", "1x4"])
def test_four_processes(nodes, rpn):
    """Ranks 1 and 3 get the id as its bytes, rank 2 pickled."""
    n = nodes * rpn
    t = time.monotonic()
    outs = launch(n, rpn, how=lambda r: "pickle" if r == 2 else "bytes",
                  CCL_DEBUG="INFO", CCL_DEBUG_SUBSYS="INIT")
    took = time.monotonic() - t
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and f"ok rank {r}: " in out, out
        # libccl made the layout asked for, and on several nodes the data crossed them.
        assert f"ready: rank {r} of {n} ({nodes} node{'s' if nodes > 1 else ''} of {rpn})" in out, out
        if nodes > 1:
            assert f"rank {r} [init]: inter-node proxy: " in out and " 0 messages" not in out, out
    cases = {int(out.split("ok rank ")[1].split(":")[0]): out.split(": ")[-1] for _, out in outs if "ok rank" in out}
    assert len(set(cases.values())) == 1, cases
    print(f"{nodes}x{rpn}: {cases[0].strip()} per rank, {took:.1f} s")


# ---- failures ----

def test_damaged_id_is_refused():
    data = bytearray(bytes(ccl.get_unique_id()))
    data[20] ^= 0xFF  # in the cookie: the checksum no longer matches
    with pytest.raises(ccl.InvalidArgumentError,
                       match=r"ccl_comm_init_rank_id: argument 'id' is damaged \(its checksum does not match\)"):
        ccl.init_rank(0, 2, unique_id=bytes(data), backend="cpu")


def test_id_libccl_did_not_make_is_refused():
    with pytest.raises(ccl.InvalidArgumentError,
                       match=r"argument 'id' was not made by ccl_get_unique_id") as e:
        ccl.init_rank(0, 2, unique_id=bytes(128), backend="cpu")
    assert e.value.result_name == "CCL_ERR_INVALID_ARGUMENT"


@pytest.mark.parametrize("rank,nranks,msg", [(4, 4, r"argument 'rank' is 4, outside 0\.\.3"),
                                             (-1, 4, r"argument 'rank' is -1, outside 0\.\.3"),
                                             (0, 0, r"argument 'nranks' is 0, outside 1\.\.")],
                         ids=["rank-4-of-4", "rank--1", "nranks-0"])
def test_rank_out_of_range_is_refused(rank, nranks, msg):
    with pytest.raises(ccl.InvalidArgumentError, match=r"ccl_comm_init_rank_id: " + msg):
        ccl.init_rank(rank, nranks, unique_id=ccl.get_unique_id(), backend="cpu")


def test_arguments_the_package_refuses():
    uid = ccl.get_unique_id()
    with pytest.raises(ccl.InvalidArgumentError, match=r"unique_id= and store= are two bootstraps: give one"):
        ccl.init_rank(0, 2, unique_id=uid, store=object())
    with pytest.raises(ccl.InvalidArgumentError, match=r"ranks_per_node= needs unique_id="):
        ccl.init_rank(0, 2, store=object(), ranks_per_node=1)
    with pytest.raises(TypeError, match=r"init_rank: ranks_per_node must be an integer, not float"):
        ccl.init_rank(0, 2, unique_id=uid, ranks_per_node=1.5)
    with pytest.raises(ccl.InvalidArgumentError, match=r"init_rank: rank is 4294967296, out of range"):
        ccl.init_rank(1 << 32, 2, unique_id=uid)


_LAUNCHER = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
             "SLURM_PROCID", "SLURM_NTASKS")


def test_rank_and_nranks_from_the_launcher(monkeypatch):
    """Without rank and nranks: the launcher's (torchrun's RANK and WORLD_SIZE here), else an
    error that says what is missing."""
    for k in _LAUNCHER:
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ccl.InvalidArgumentError, match=r"init_rank: unique_id= needs rank and nranks \(or a "
                                                       r"launcher's environment"):
        ccl.init_rank(unique_id=ccl.get_unique_id(), backend="cpu")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    comm = ccl.init_rank(unique_id=ccl.get_unique_id(), backend="cpu")
    assert (comm.rank, comm.size) == (0, 1)
    comm.destroy()


def test_rank_that_never_comes():
    """Ranks 0-2 of 4 start, rank 3 never does: all three fail within the timeout, the root
    naming rank 3. The timeout leaves room for ranks 1 and 2 to start under load (each is a
    new interpreter importing numpy): with 1.5 s a busy machine let the root's deadline pass
    before they came, and it named them too."""
    t = time.monotonic()
    outs = launch(4, 2, start=[1, 2], CCL_TIMEOUT_MS="4000")
    took = time.monotonic() - t
    for rc, out in outs:
        assert rc == 3 and "error TimeoutError: " in out and "rank 3 of 4 never connected to the root" in out, out
    assert took < 20, f"{took:.1f} s"


@pytest.mark.parametrize("var,value,cls,msg", [
    ("CCL_BOOTSTRAP_ADDR", "no-such-host.invalid", ccl.InvalidArgumentError,
     r"ccl_get_unique_id: CCL_BOOTSTRAP_ADDR='no-such-host.invalid': cannot resolve 'no-such-host.invalid'"),
    ("CCL_BOOTSTRAP_ADDR", "127.0.0.1:99999", ccl.InvalidArgumentError, r"'99999' is not a port"),
    ("CCL_SOCKET_IFNAME", "nosuchif", ccl.InvalidArgumentError,
     r"CCL_SOCKET_IFNAME='nosuchif' admits no interface of this host"),
], ids=["unresolvable", "bad-port", "no-interface"])
def test_root_address_that_names_nothing(monkeypatch, var, value, cls, msg):
    for k in _CLEAN:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(var, value)
    with pytest.raises(cls, match=msg):
        ccl.get_unique_id()


def test_root_address_given(monkeypatch):
    """CCL_BOOTSTRAP_ADDR=127.0.0.1: the root listens there, and a communicator forms."""
    monkeypatch.delenv("CCL_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("CCL_BOOTSTRAP_ADDR", "127.0.0.1")
    comm = ccl.init_rank(0, 1, unique_id=ccl.get_unique_id(), backend="cpu")
    comm.destroy()


# ---- the documentation's program ----

def test_docs_example(tmp_path):
    """docs/python.md's complete program for several nodes (the first ```python block after
    "**Several nodes, from a unique id**") runs as written: 4 spawned processes, 2 nodes of
    2, every rank printing the sum."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc[doc.index("**Several nodes, from a unique id**"):], re.S).group(1)
    prog = tmp_path / "uniqueid_example.py"
    prog.write_text(code)
    pkg = str(Path(ccl.__file__).resolve().parents[1])  # the spawned ranks import ccl from here too
    path = os.environ.get("PYTHONPATH")
    p = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=120,
                       env=_env(PYTHONPATH=pkg + (os.pathsep + path if path else "")))
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(4):
        assert f"rank {r} of 4: [10. 10. 10. 10.]" in p.stdout, p.stdout + p.stderr
