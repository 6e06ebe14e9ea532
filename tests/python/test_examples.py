"""examples/python/*.py run on the CPU backend (threads, and the top-k one under an
mpirun-like environment, one process per rank)."""
import os
import subprocess
import sys
import uuid

from conftest import ROOT

EX = ROOT / "examples" / "python"


def run(args, env=None, timeout=180):
    return subprocess.run([sys.executable] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def test_topk_threads():
    p = run([EX / "topk_allreduce.py", "--ranks", "3", "--n", "20000", "--k", "200", "--backend", "cpu"])
    assert p.returncode == 0 and ": ok" in p.stdout, p.stdout + p.stderr


def test_topk_tree_threads():
    p = run([EX / "topk_allreduce.py", "--ranks", "5", "--n", "20000", "--k", "200", "--backend", "cpu",
             "--method", "tree"])
    assert p.returncode == 0 and "(tree)" in p.stdout and ": ok" in p.stdout, p.stdout + p.stderr


def test_topk_processes():
    job = uuid.uuid4().hex
    procs = [subprocess.Popen([sys.executable, str(EX / "topk_allreduce.py"), "--n", "5000", "--k", "50",
                               "--backend", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="2",
                                       CCL_JOB_ID=job)) for r in range(2)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert "2 processes" in outs[0] and ": ok" in outs[0], outs


def test_custom_algorithm():
    p = run([EX / "custom_algorithm.py", ROOT / "examples" / "star.ccl", "--ranks", "3", "--backend", "cpu"])
    assert p.returncode == 0 and "every element right" in p.stdout, p.stdout + p.stderr
    assert "postcondition:    proved" in p.stdout and "registered" in p.stdout


def test_custom_algorithm_refuses_a_wrong_program(tmp_path):
    bad = tmp_path / "bad.ccl"
    bad.write_text((ROOT / "examples" / "star.ccl").read_text().replace("wait others", ""))
    p = run([EX / "custom_algorithm.py", bad, "--ranks", "3", "--backend", "cpu"])
    assert p.returncode != 0 and f"{bad}:" in p.stderr and "error:" in p.stderr, p.stdout + p.stderr
