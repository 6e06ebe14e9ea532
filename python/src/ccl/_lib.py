"""Finding and loading libccl, and the C API's prototypes (ctypes; nothing to compile).

Where the library comes from, first match wins:

1. ``$CCL_LIBRARY``: a path to ``libccl.so`` (for a build tree: ``build/libccl.so``);
2. the copy bundled in this package (``ccl/_native/lib/libccl.so``, put there by
   ``pip install`` from the repository, which runs ``make``);
3. the system's loader: an installed ``libccl.so.0`` (``make install PREFIX=...`` with
   the prefix's ``lib`` on the loader path), else ``pkg-config --variable=libdir ccl``.

The shipped algorithm library: libccl finds it by itself next to the library
(``LIB/../share/ccl/algorithms``: an installed prefix, or the bundled copy, laid out the
same way; ``LIB/../algorithms``: a build tree); for an older libccl that does not, the
package sets ``$CCL_ALGORITHM_DIR`` (if unset) to the folder it finds in those places.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_void_p
from pathlib import Path
from typing import Optional

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_path: Optional[str] = None

PACKAGE_DIR = Path(__file__).resolve().parent
NATIVE_DIR = PACKAGE_DIR / "_native"


class ccl_config_t(ctypes.Structure):
    _fields_ = [
        ("backend", c_int),
        ("timeout_ms", c_int),
        ("cache_dir", c_char_p),
        ("heap_bytes", c_size_t),
    ]


ALLGATHER_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t)
BARRIER_FN = ctypes.CFUNCTYPE(c_int, c_void_p)


class ccl_bootstrap_t(ctypes.Structure):
    _fields_ = [
        ("nranks", c_int),
        ("rank", c_int),
        ("allgather", ALLGATHER_FN),
        ("barrier", BARRIER_FN),
        ("ctx", c_void_p),
    ]


# CCL_UNIQUE_ID_BYTES: ccl_unique_id_t is this many opaque bytes, passed by value.
UNIQUE_ID_BYTES = 128


class ccl_unique_id_t(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


def _candidates() -> list[tuple[str, str]]:
    """(path or name, where it came from), in search order."""
    out: list[tuple[str, str]] = []
    env = os.environ.get("CCL_LIBRARY")
    if env:
        out.append((env, "$CCL_LIBRARY"))
        return out
    p = NATIVE_DIR / "lib" / "libccl.so"
    if p.exists():
        out.append((str(p), "the package's bundled copy"))
    out.append(("libccl.so.0", "the system loader"))
    found = ctypes.util.find_library("ccl")
    if found:
        out.append((found, "ldconfig"))
    if shutil.which("pkg-config"):
        try:
            libdir = subprocess.run(["pkg-config", "--variable=libdir", "ccl"], capture_output=True, text=True,
                                    timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            libdir = ""
        if libdir:
            out.append((os.path.join(libdir, "libccl.so.0"), "pkg-config"))
            out.append((os.path.join(libdir, "libccl.so"), "pkg-config"))
    return out


def _algorithm_dir_near(lib_path: str) -> Optional[str]:
    """A build tree's algorithms/ (next to the library or up to two levels above), or an
    installed prefix's share/ccl/algorithms (lib/../share)."""
    d = Path(lib_path).resolve().parent
    for cand in (d / "algorithms", d.parent / "algorithms", d.parent.parent / "algorithms",
                 d.parent / "share" / "ccl" / "algorithms"):
        if cand.is_dir() and any(cand.glob("*/*.ccl")):
            return str(cand)
    return None


def _declare(lib: ctypes.CDLL) -> None:
    R = c_int  # ccl_result_t
    vp, pp = c_void_p, POINTER(c_void_p)
    protos = {
        "ccl_result_string": (c_char_p, [c_int]),
        "ccl_dtype_size": (c_size_t, [c_int]),
        "ccl_dtype_name": (c_char_p, [c_int]),
        "ccl_op_name": (c_char_p, [c_int]),
        "ccl_dtype_parse": (c_int, [c_char_p, POINTER(c_int)]),
        "ccl_op_parse": (c_int, [c_char_p, POINTER(c_int)]),
        "ccl_comm_init_rank": (R, [pp, POINTER(ccl_bootstrap_t), c_int, POINTER(ccl_config_t)]),
        "ccl_comm_init_all": (R, [pp, c_int, POINTER(c_int), POINTER(ccl_config_t)]),
        "ccl_comm_destroy": (R, [vp]),
        "ccl_comm_rank": (R, [vp, POINTER(c_int)]),
        "ccl_comm_size": (R, [vp, POINTER(c_int)]),
        "ccl_comm_backend": (R, [vp, POINTER(c_int)]),
        "ccl_comm_synchronize": (R, [vp]),
        "ccl_comm_last_error": (c_char_p, [vp]),
        "ccl_mem_alloc": (R, [vp, pp, c_size_t]),
        "ccl_mem_free": (R, [vp, vp]),
        "ccl_mem_copy": (R, [vp, vp, vp, c_size_t]),
        "ccl_algorithm_load": (R, [vp, c_char_p, c_int, pp]),
        "ccl_algorithm_free": (R, [vp]),
        "ccl_algorithm_name": (c_char_p, [vp]),
        "ccl_algorithm_collective": (c_char_p, [vp]),
        "ccl_algorithm_run": (R, [vp, vp, vp, c_size_t, c_int, c_int, vp]),
        "ccl_all_reduce": (R, [vp, vp, c_size_t, c_int, c_int, vp, vp]),
        "ccl_all_gather": (R, [vp, vp, c_size_t, c_int, vp, vp]),
        "ccl_reduce_scatter": (R, [vp, vp, c_size_t, c_int, c_int, vp, vp]),
        "ccl_all_to_all": (R, [vp, vp, c_size_t, c_int, vp, vp]),
        "ccl_all_gather_v": (R, [vp, c_size_t, vp, POINTER(c_size_t), POINTER(c_size_t), c_int, vp, vp]),
        "ccl_all_to_all_v": (R, [vp, POINTER(c_size_t), POINTER(c_size_t), vp, POINTER(c_size_t), POINTER(c_size_t),
                                 c_int, vp, vp]),
        "ccl_send": (R, [vp, c_size_t, c_int, c_int, vp, vp]),
        "ccl_recv": (R, [vp, c_size_t, c_int, c_int, vp, vp]),
        "ccl_group_start": (R, []),
        "ccl_group_end": (R, []),
        "ccl_broadcast": (R, [vp, vp, c_size_t, c_int, c_int, vp, vp]),
        "ccl_reduce": (R, [vp, vp, c_size_t, c_int, c_int, c_int, vp, vp]),
        "ccl_comm_use_algorithm": (R, [vp, vp, c_size_t, c_size_t]),
        "ccl_comm_explain_choice": (R, [vp, ctypes.c_char_p, c_size_t]),
    }
    optional = {
        "ccl_algorithm_check": (R, [c_char_p, c_int, c_int, ctypes.c_char_p, c_size_t, POINTER(c_size_t)]),
        "ccl_version": (c_char_p, []),
        "ccl_comm_split": (R, [vp, c_int, c_int, pp, POINTER(ccl_config_t)]),
        "ccl_barrier": (R, [vp, vp]),
        "ccl_mem_register": (R, [vp, vp, c_size_t, pp]),
        "ccl_mem_deregister": (R, [vp, vp]),
        "ccl_mem_pool_attach": (R, [vp]),
        "ccl_mem_pool_detach": (R, [vp]),
        "ccl_get_unique_id": (R, [POINTER(ccl_unique_id_t)]),
        "ccl_comm_init_rank_id": (R, [pp, c_int, ccl_unique_id_t, c_int, c_int, c_int, POINTER(ccl_config_t)]),
    }
    for name, (res, args) in protos.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    for name, (res, args) in optional.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.restype, f.argtypes = res, args


def lib() -> ctypes.CDLL:
    """The loaded libccl (loaded on first use)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for cand, where in _candidates():
            try:
                loaded = ctypes.CDLL(cand, mode=ctypes.RTLD_LOCAL)
            except OSError as e:
                tried.append(f"  {cand} ({where}): {e}")
                continue
            try:
                _declare(loaded)
            except AttributeError as e:
                tried.append(f"  {cand} ({where}): not libccl: {e}")
                continue
            path = _loaded_path(loaded) or cand
            if "CCL_ALGORITHM_DIR" not in os.environ:
                alg = _algorithm_dir_near(path)
                if alg:
                    os.environ["CCL_ALGORITHM_DIR"] = alg
            _lib, _path = loaded, path
            return loaded
        raise ImportError("ccl: cannot load libccl; tried:\n" + "\n".join(tried) +
                          "\nBuild it (make, in the repository) and set CCL_LIBRARY=/path/to/build/libccl.so, "
                          "or pip install the package from the repository (docs/python.md)")


def _loaded_path(loaded: ctypes.CDLL) -> Optional[str]:
    """The file a loaded library came from (dladdr on one of its functions)."""

    class Dl_info(ctypes.Structure):
        _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p), ("dli_sname", c_char_p),
                    ("dli_saddr", c_void_p)]

    libdl = ctypes.CDLL(None)
    dladdr = getattr(libdl, "dladdr", None)
    if dladdr is None:
        return None
    dladdr.argtypes = [c_void_p, POINTER(Dl_info)]
    info = Dl_info()
    addr = ctypes.cast(loaded.ccl_result_string, c_void_p)
    if dladdr(addr, ctypes.byref(info)) and info.dli_fname:
        return os.fsdecode(info.dli_fname)
    return None


def library_path() -> str:
    """The path of the libccl this process loaded."""
    lib()
    assert _path is not None
    return _path


def tool_path(name: str) -> Optional[str]:
    """A CCL tool (``ccl-tune``, ``cclc``): next to the library (a build tree), in the bin
    folder beside its lib (an installed prefix, or the bundled copy), or on PATH."""
    libdir = Path(library_path()).resolve().parent
    for cand in (libdir / name, libdir.parent / "bin" / name):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)
