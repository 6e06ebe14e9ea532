"""The console scripts ``cclc`` and ``ccl-tune`` of the installed package: each replaces
itself (exec) with the program ``pip install`` bundled (``ccl/_native/bin/``), so the
bundled compiler and tuner are on PATH wherever the package's scripts are (a venv's
bin/). Without a bundled copy (``CCL_PIP_NO_BUILD=1``) the one next to the libccl in use
is taken (a build tree, an installed prefix's bin/); never one found on PATH, which
would be this script again."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from ._lib import NATIVE_DIR


def _program(name: str) -> Optional[str]:
    cands = [NATIVE_DIR / "bin" / name]
    try:
        from ._lib import library_path

        libdir = Path(library_path()).resolve().parent
        cands += [libdir / name, libdir.parent / "bin" / name]
    except ImportError:  # no libccl either: only the bundled copy could do
        pass
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def _run(name: str) -> int:
    path = _program(name)
    if path is None:
        print(f"{name}: this installation of the ccl package has no {name} (it bundles one when pip builds it "
              f"from the repository; CCL_PIP_NO_BUILD=1 installs skip it): use the repository's build/{name}",
              file=sys.stderr)
        return 127
    os.execv(path, [path] + sys.argv[1:])
    return 127  # not reached: execv replaces this process or raises


def cclc() -> int:
    return _run("cclc")


def ccl_tune() -> int:
    return _run("ccl-tune")
