"""bench/torch_bench.py without a GPU (and without torch): it imports, reads its
arguments (--buffers' kinds among them) and refuses bad ones before torch is imported,
and its CSV and Markdown come out right from given timings. The benchmark itself needs
torchrun and GPUs (bench/multi-gpu-session.sh's torch step)."""
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "torch_bench.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("torch_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_imports_without_torch():
    tb = load_bench()
    assert tb.torch is None  # torch comes with the run, not with the import


def test_default_arguments():
    a = load_bench().parse_args([])
    assert a.buffers == ["torch", "symmetric"]
    assert a.sizes == [1 << 10, 64 << 10, 1 << 20, 16 << 20, 128 << 20]
    assert a.colls == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"]


def test_every_kind_of_buffers():
    a = load_bench().parse_args(["--buffers", "pool,registered,torch,symmetric", "--sizes", "4K,2M", "--colls",
                                 "all_gather"])
    assert a.buffers == ["pool", "registered", "torch", "symmetric"]
    assert a.sizes == [4096, 2 << 20] and a.colls == ["all_gather"]


def test_more_collectives_on_request():
    tb = load_bench()
    a = tb.parse_args(["--colls", "send_recv,all_to_all_v,all_reduce"])
    assert a.colls == ["send_recv", "all_to_all_v", "all_reduce"]
    assert "send_recv" in tb.NCCL_NO_GRAPH and "all_to_all_v" not in tb.NCCL_NO_GRAPH


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_all_to_all_v_splits(n):
    """Skewed (1 to 3 shares), about nbytes from every rank, the heaviest a different
    rank for each sender, and the same on every rank (a function of nbytes and n)."""
    tb = load_bench()
    nbytes = 1 << 20
    c = tb.splits(nbytes, n)
    assert c == tb.splits(nbytes, n) and len(c) == n and all(len(row) == n for row in c)
    for r, row in enumerate(c):
        assert nbytes // 2 - n <= sum(row) <= nbytes // 2
        assert max(row) >= 2.9 * min(row) and min(row) >= 1
        assert row.index(max(row)) == (r - 1) % n
    assert len({row.index(max(row)) for row in c}) == n
    assert all(min(row) >= 1 for row in tb.splits(2, n))  # the smallest sizes still send to everyone


@pytest.mark.parametrize("args, says", [
    (["--buffers", "torch,heap"], "--buffers 'torch,heap': expected a comma-separated list of torch, symmetric, "
                                  "pool, registered (not heap)"),
    (["--buffers", "pool,pool"], "a word appears twice"),
    (["--colls", "allreduce"], "--colls 'allreduce': expected"),
    (["--sizes", "1X"], "--sizes '1X': expected sizes"),
    (["--calls", "0"], "'0': expected a positive integer"),
])
def test_bad_arguments(capsys, args, says):
    with pytest.raises(SystemExit) as e:
        load_bench().parse_args(args)
    assert e.value.code == 2
    assert says in capsys.readouterr().err


def test_help_runs_without_a_gpu():
    out = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--buffers" in out.stdout and "registered" in out.stdout


def test_without_torch_says_so():
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed here: the message for its absence cannot show")
    out = subprocess.run([sys.executable, str(BENCH), "--buffers", "pool"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "RANK": "0", "WORLD_SIZE": "1"})
    assert out.returncode != 0 and "torch_bench.py: needs torch with CUDA" in out.stderr, out.stderr


def rows_for(tb, kinds):
    rows = []
    for coll, nbytes, base in (("all_reduce", 1024, 10.0), ("all_reduce", 1 << 20, 20.0), ("all_gather", 1024, 8.0)):
        r = {"collective": coll, "bytes": nbytes, "ranks": 4, "checked": "ok", "nccl_graph_us": base,
             "nccl_eager_us": 2 * base}
        for i, k in enumerate(kinds):
            key = tb.KINDS[k][0]
            r[f"{key}_graph_us"] = base * (0.5 + 0.25 * i)
            r[f"{key}_eager_us"] = math.nan if k == "registered" else 2 * base * (0.5 + 0.25 * i)
        rows.append(r)
    return rows


def test_csv_keeps_the_default_columns(tmp_path):
    """The default kinds write the columns (and order) the CSVs in docs/perf have."""
    tb = load_bench()
    path = tmp_path / "t.csv"
    tb.write_csv(path, rows_for(tb, ["torch", "symmetric"]), ["torch", "symmetric"])
    lines = path.read_text().splitlines()
    assert lines[0] == ("collective,bytes,ranks,checked,nccl_graph_us,nccl_eager_us,ccl_graph_us,ccl_eager_us,"
                        "ccl_sym_graph_us,ccl_sym_eager_us")
    assert lines[1] == "all_reduce,1024,4,ok,10.000,20.000,5.000,10.000,7.500,15.000"
    assert len(lines) == 4


def test_csv_and_markdown_with_pool_and_registered(tmp_path):
    tb = load_bench()
    kinds = ["torch", "pool", "registered"]
    path = tmp_path / "t.csv"
    tb.write_csv(path, rows_for(tb, kinds), kinds)
    head = path.read_text().splitlines()[0].split(",")
    assert head[4:] == ["nccl_graph_us", "nccl_eager_us", "ccl_graph_us", "ccl_eager_us", "ccl_pool_graph_us",
                        "ccl_pool_eager_us", "ccl_reg_graph_us", "ccl_reg_eager_us"]
    md = tb.markdown(rows_for(tb, kinds), kinds, ["all_reduce", "all_gather"], "TITLE",
                     {"registered": "comm.register refused the tensor: why"})
    lines = md.splitlines()
    assert lines[0] == "TITLE"
    assert "CCL reg (--buffers registered): not timed: comm.register refused the tensor: why" in md
    head = next(ln for ln in lines if ln.startswith("| bytes"))
    assert head == ("| bytes | NCCL graph | CCL graph | CCL/NCCL | CCL pool graph | CCL pool/NCCL | CCL reg graph | "
                    "CCL reg/NCCL | NCCL eager | CCL eager | CCL/NCCL | CCL pool eager | CCL pool/NCCL | CCL reg eager "
                    "| CCL reg/NCCL | check |")
    first = next(ln for ln in lines if ln.startswith("| 1024 |"))
    # graph: NCCL 10, CCL 5 (0.50), pool 7.5 (0.75), reg 10 (1.00); eager: NCCL 20, CCL 10, pool 15, reg nan
    assert first == ("| 1024 | 10.00 | 5.00 | 0.50 | 7.50 | 0.75 | 10.00 | 1.00 | 20.00 | 10.00 | 0.50 | 15.00 | "
                     "0.75 | n/a | n/a | ok |")
    assert md.count("\n### ") == 2 and md.count("| 1024 |") == 2


def test_a_kind_that_does_not_fit_one_size():
    """Symmetric tensors that do not fit the heap at one size are not timed there only: the
    kind stays in the run, and the note is said once however often it was met."""
    tb = load_bench()
    unavailable = {}
    e = tb.Unavailable("all_to_all at 268435456 bytes: do not fit", one_size=True)
    tb.note_unavailable(unavailable, "symmetric", e)
    tb.note_unavailable(unavailable, "symmetric", e)
    assert "symmetric" not in unavailable
    assert unavailable["sizes"] == ["CCL sym: all_to_all at 268435456 bytes: do not fit"]
    tb.note_unavailable(unavailable, "pool", tb.Unavailable("no MemPool"))
    assert unavailable["pool"] == "no MemPool"
    kinds = ["torch", "symmetric"]
    md = tb.markdown(rows_for(tb, kinds), kinds, ["all_reduce", "all_gather"], "TITLE", unavailable)
    assert md.count("not timed: CCL sym: all_to_all at 268435456 bytes: do not fit") == 1
