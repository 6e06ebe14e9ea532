"""The shipped algorithm library from Python: where it is, what it holds, and names for
its files ("allreduce/ring") wherever a path is taken (``comm.load``, ``ccl.check``).

The folder is the one libccl reads for its standard collectives: ``$CCL_ALGORITHM_DIR``
when set, else the one found next to the loaded libccl (an installed prefix's
``share/ccl/algorithms``, the bundled copy's, a build tree's ``algorithms/``; _lib.py).
A name is a file's path in that folder without ``.ccl``: ``allreduce/ring``,
``literature/allreduce/rabenseifner``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from . import _lib
from ._errors import InvalidArgumentError

_HEADER = re.compile(r"algorithm\s+([A-Za-z0-9_]+)\s*:\s*([A-Za-z0-9_]+)")


def algorithm_dir() -> Optional[str]:
    """The shipped library's folder (None where none is found)."""
    _lib.lib()  # loading it sets $CCL_ALGORITHM_DIR when unset and a folder is found
    env = os.environ.get("CCL_ALGORITHM_DIR")
    if env:
        return env
    return _lib._algorithm_dir_near(_lib.library_path())


def _strip_comments(text: str) -> str:
    """The text after its leading blanks and # comment lines (libccl's rule for telling
    source from a path)."""
    lines = text.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("#")):
        lines.pop(0)
    return "\n".join(lines).lstrip()


def _collective(path: Path) -> Optional[str]:
    try:
        head = path.read_text(errors="replace")[:4096]
    except OSError:
        return None
    m = _HEADER.match(_strip_comments(head))
    return m.group(2) if m else None


def algorithms(collective: Optional[str] = None) -> list[str]:
    """The shipped algorithms' names ("allreduce/ring", ...), sorted; only those of
    ``collective`` ("allreduce", "alltoallv", ...; as their headers say) when given."""
    d = algorithm_dir()
    if d is None:
        return []
    root = Path(d)
    names = []
    for p in sorted(root.rglob("*.ccl")):
        if collective is not None and _collective(p) != collective:
            continue
        names.append(p.relative_to(root).with_suffix("").as_posix())
    return names


def resolve(fn: str, path_or_source: str) -> str:
    """What libccl should read for ``path_or_source``: source text and existing files as
    they are; a shipped algorithm's name (a relative path without ``.ccl`` that is no
    file here) as its file. Another path goes to libccl, which says it cannot read it; a
    name that is not shipped raises here, listing what is."""
    if _strip_comments(path_or_source).startswith("algorithm") or os.path.exists(path_or_source):
        return path_or_source
    if path_or_source.endswith(".ccl") or os.path.isabs(path_or_source):
        return path_or_source
    d = algorithm_dir()
    if d is not None and (Path(d) / f"{path_or_source}.ccl").is_file():
        return str(Path(d) / f"{path_or_source}.ccl")
    near = [n for n in algorithms() if n.split("/")[0] == path_or_source.split("/")[0]] or algorithms()
    where = f"in {d}" if d else "(no algorithm library found: set CCL_ALGORITHM_DIR)"
    raise InvalidArgumentError(f"{fn}: '{path_or_source}' is not a file, CCL source, or a shipped algorithm {where}"
                               f"; ccl.algorithms() lists them: {', '.join(near[:12])}"
                               f"{', ...' if len(near) > 12 else ''}")
