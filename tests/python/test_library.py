"""The shipped algorithm library from Python: ccl.algorithms() lists it, and its names
("allreduce/ring") load and check like paths."""
import numpy as np
import pytest

import ccl
from conftest import ROOT, run_ranks


def test_algorithms_lists_the_shipped_library():
    names = ccl.algorithms()
    assert "allreduce/ring" in names and "alltoallv/pairwise" in names
    assert "literature/allreduce/rabenseifner" in names
    assert names == sorted(names)
    assert len(names) == len(list((ROOT / "algorithms").rglob("*.ccl")))
    assert set(ccl.algorithms("allreduce")) >= {"allreduce/ring", "literature/allreduce/rabenseifner"}
    assert all(n.startswith(("broadcast/", "literature/broadcast/")) for n in ccl.algorithms("broadcast"))
    assert ccl.algorithms("nonesuch") == []
    assert ccl.algorithm_dir() is not None


def test_load_and_check_by_name(comms2):
    algs = run_ranks(comms2, lambda r, c: c.load("allreduce/ring"))
    assert algs[0].name == "ring" and algs[0].collective == "allreduce"
    outs = run_ranks(comms2, lambda r, c: algs[r](np.full(8, r + 1.0), out=np.zeros(8)))
    for o in outs:
        np.testing.assert_array_equal(o, np.full(8, 3.0))
    for a in algs:
        a.free()
    assert "proved" in ccl.check("reduce/tree", ranks=4, root=2)


def test_unknown_name_lists_what_exists(comms2):
    with pytest.raises(ccl.InvalidArgumentError, match="load: 'allreduce/rnig' is not a file, CCL source, or a "
                                                       "shipped algorithm in .*; ccl.algorithms.. lists them: "
                                                       "allreduce/allpairs, "):
        comms2[0].load("allreduce/rnig")
