"""The tuner from Python: run ``ccl-tune``'s search and apply the table it writes.

``ccl.tune(...)`` runs the ``ccl-tune`` program (bundled with the package, next to the
library in a build tree, in the installed prefix's bin, or on PATH) with the options
given, and returns a :class:`TuneTable`. ``table.apply()`` (or
``ccl.use_tune_table(path)``) sets ``CCL_TUNE_FILE``, which libccl reads at each
communicator's first standard collective: apply it before that (every rank must see the
same table; docs/tuner.md).
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from . import _lib
from ._errors import CclError


@dataclass
class TuneTable:
    path: str
    text: str
    summary: str  # what ccl-tune printed

    def entries(self) -> list[str]:
        """The table's entry lines (collective, size bucket, file, shape)."""
        colls = {"allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce"}
        return [l for l in self.text.splitlines() if l.split()[:1] and l.split()[0] in colls]

    def apply(self) -> None:
        use_tune_table(self.path)


def use_tune_table(path: Optional[str]) -> None:
    """Makes communicators' standard collectives follow this table (``CCL_TUNE_FILE``),
    from their first collective on; None: back to the default choice (the cache folder's
    table or the built-in one); "none": no table at all."""
    if path is None:
        os.environ.pop("CCL_TUNE_FILE", None)
    else:
        os.environ["CCL_TUNE_FILE"] = os.fspath(path)


def tune(collectives: Union[str, Sequence[str]] = "allreduce", min_bytes: Union[int, str, None] = None,
         max_bytes: Union[int, str, None] = None, *, ranks: Optional[int] = None, backend: Optional[str] = None,
         dtype: Optional[str] = None, output: Optional[str] = None, extra_args: Sequence[str] = (),
         timeout: Optional[float] = None, apply: bool = False) -> TuneTable:
    """Runs ccl-tune (threads mode: ``ranks`` ranks in one child process; default: every
    visible GPU, or 4 on the CPU) and returns its table. ``collectives``: names or "all";
    sizes in bytes or with K/M/G; ``extra_args``: more ccl-tune options (``--instances``,
    ``--iters``, ...; ``ccl-tune --help``). ``apply=True`` applies it too."""
    exe = _lib.tool_path("ccl-tune")
    if exe is None:
        raise CclError("ccl-tune not found (bundled, next to libccl, in the prefix's bin, or on PATH)")
    colls = collectives if isinstance(collectives, str) else ",".join(collectives)
    if output is None:
        fd, output = tempfile.mkstemp(prefix="ccl-tune-", suffix=".tbl")
        os.close(fd)
    cmd = [exe, "-c", colls, "-o", output]
    if min_bytes is not None:
        cmd += ["-b", str(min_bytes)]
    if max_bytes is not None:
        cmd += ["-e", str(max_bytes)]
    if ranks is not None:
        cmd += ["--ranks", str(ranks)]
    if backend is not None:
        cmd += ["--backend", backend]
    if dtype is not None:
        cmd += ["-d", dtype]
    cmd += list(extra_args)
    env = dict(os.environ)
    env.pop("CCL_TUNE_FILE", None)  # measure the candidates, not an earlier table's choice
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise CclError(f"ccl-tune failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr.strip() or p.stdout.strip()}")
    with open(output) as f:
        text = f.read()
    table = TuneTable(output, text, p.stdout)
    if apply:
        table.apply()
    return table
