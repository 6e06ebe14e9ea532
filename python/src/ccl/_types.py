"""dtype and op names: CCL's, numpy's and torch's, mapped to ccl_dtype_t / ccl_op_t."""
from __future__ import annotations

import enum
import operator
import sys
from typing import Any, Optional, Union


class DType(enum.IntEnum):
    """ccl_dtype_t."""

    F32 = 0
    F64 = 1
    F16 = 2
    BF16 = 3
    I32 = 4
    I64 = 5
    U8 = 6
    FP8_E4M3 = 7
    FP8_E5M2 = 8
    I8 = 9
    U32 = 10
    U64 = 11

    @property
    def itemsize(self) -> int:
        return _SIZES[self]


_SIZES = {DType.F32: 4, DType.F64: 8, DType.F16: 2, DType.BF16: 2, DType.I32: 4, DType.I64: 8, DType.U8: 1,
          DType.FP8_E4M3: 1, DType.FP8_E5M2: 1, DType.I8: 1, DType.U32: 4, DType.U64: 8}


class Op(enum.IntEnum):
    """ccl_op_t."""

    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4


# Names from CCL (f32, bf16, fp8_e4m3, i8, u64), numpy (float32, uint8; ml_dtypes' bfloat16,
# float8_e4m3fn, float8_e5m2) and torch (str(torch.float32) minus "torch."). Where CCL's
# short names and numpy's type codes collide, a name means CCL's: "i8" is int8 and "u8"
# uint8 (as ccl_dtype_parse reads them), not numpy's 8-byte "i8"/"u8" (np.dtype("i8")
# itself, a dtype object, is int64 as numpy says).
_NAMES = {
    "f32": DType.F32, "float32": DType.F32, "float": DType.F32,
    "f64": DType.F64, "float64": DType.F64, "double": DType.F64,
    "f16": DType.F16, "float16": DType.F16, "half": DType.F16,
    "bf16": DType.BF16, "bfloat16": DType.BF16,
    "i32": DType.I32, "int32": DType.I32, "int": DType.I32,
    "i64": DType.I64, "int64": DType.I64, "long": DType.I64,
    "u8": DType.U8, "uint8": DType.U8,
    "i8": DType.I8, "int8": DType.I8,
    "u32": DType.U32, "uint32": DType.U32,
    "u64": DType.U64, "uint64": DType.U64,
    "fp8_e4m3": DType.FP8_E4M3, "e4m3": DType.FP8_E4M3, "float8_e4m3fn": DType.FP8_E4M3,
    "fp8_e5m2": DType.FP8_E5M2, "e5m2": DType.FP8_E5M2, "float8_e5m2": DType.FP8_E5M2,
}

# __array_interface__ / __cuda_array_interface__ type strings.
# numpy's codes: here "i8" is int64 and "u8" uint64 (8 bytes).
_TYPESTR = {"f4": DType.F32, "f8": DType.F64, "f2": DType.F16, "i4": DType.I32, "i8": DType.I64, "u1": DType.U8,
            "i1": DType.I8, "u4": DType.U32, "u8": DType.U64}

# DLPack (code, bits): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4; fp8 codes (DLPack 1.0).
_DLPACK = {(2, 32): DType.F32, (2, 64): DType.F64, (2, 16): DType.F16, (4, 16): DType.BF16, (0, 32): DType.I32,
           (0, 64): DType.I64, (1, 8): DType.U8, (10, 8): DType.FP8_E4M3, (12, 8): DType.FP8_E5M2,
           (0, 8): DType.I8, (1, 32): DType.U32, (1, 64): DType.U64}

_OPS = {"sum": Op.SUM, "+": Op.SUM, "prod": Op.PROD, "product": Op.PROD, "*": Op.PROD, "min": Op.MIN,
        "max": Op.MAX, "avg": Op.AVG, "mean": Op.AVG, "average": Op.AVG}

# Every dtype, as messages list them.
_LIST = ", ".join(d.name.lower() for d in DType)

DTypeLike = Union[DType, str, Any]
OpLike = Union[Op, str, Any]


def to_dtype(d: DTypeLike) -> DType:
    """A ccl DType from a DType, a name ("bf16", "float32"), a numpy dtype or type, a torch
    dtype, or an MPI datatype of mpi4py (MPI.FLOAT, MPI.DOUBLE, ...)."""
    try:
        return _CACHE[d]
    except (KeyError, TypeError):
        pass
    r = _to_dtype(d)
    try:
        if not isinstance(d, str) or len(_CACHE) < 256:
            _CACHE[d] = r
    except TypeError:
        pass
    return r


_CACHE: dict = {}


def known_dtype(d: Any) -> Optional[DType]:
    """to_dtype(d) for a hashable d (a numpy or torch dtype), or None where to_dtype would
    raise: the fast road's lookup (a dict hit after the first call)."""
    r = _CACHE.get(d)
    if r is None:
        try:
            r = to_dtype(d)
        except (ValueError, TypeError):
            return None
    return r


def _to_dtype(d: DTypeLike) -> DType:
    if isinstance(d, DType):
        return d
    if isinstance(d, int) and not isinstance(d, bool):
        return DType(d)
    if isinstance(d, str):
        key = d.lower().removeprefix("torch.").removeprefix("np.").removeprefix("numpy.")
        if key in _NAMES:
            return _NAMES[key]
        raise ValueError(f"unknown dtype '{d}' ({_LIST}, or numpy's and torch's names)")
    mod = type(d).__module__
    if mod.startswith("torch"):
        return to_dtype(str(d))
    if mod.startswith("mpi4py"):
        return _from_mpi(d)
    if getattr(d, "isnative", True) is False:  # a numpy dtype in the other byte order: '>f4' here
        raise ValueError(byte_order_message(str(d)))
    name = getattr(d, "name", None)  # numpy dtype (and ml_dtypes' extension dtypes)
    if name is None and isinstance(d, type):
        name = d.__name__  # numpy scalar type: np.float32
    if isinstance(name, str) and name in _NAMES:
        return _NAMES[name]
    raise ValueError(f"dtype {d!r} has no CCL equivalent ({_LIST})")


def byte_order_message(dtype: str) -> str:
    return (f"dtype {dtype} is byte-swapped (not this machine's {sys.byteorder}-endian order): CCL would read "
            f"its bytes as native numbers; pass x.astype(x.dtype.newbyteorder('=')) and swap the result back")


def _from_mpi(d: Any) -> DType:
    from mpi4py import MPI  # only reached with an mpi4py object

    # Pairs, not a dict: mpi4py's Datatype objects compare equal but are not hashable.
    table = ((MPI.FLOAT, DType.F32), (MPI.DOUBLE, DType.F64), (MPI.INT32_T, DType.I32), (MPI.INT, DType.I32),
             (MPI.INT64_T, DType.I64), (MPI.LONG, DType.I64), (MPI.UINT8_T, DType.U8), (MPI.UNSIGNED_CHAR, DType.U8),
             (MPI.BYTE, DType.U8), (MPI.INT8_T, DType.I8), (MPI.SIGNED_CHAR, DType.I8), (MPI.UINT32_T, DType.U32),
             (MPI.UNSIGNED, DType.U32), (MPI.UINT64_T, DType.U64), (MPI.UNSIGNED_LONG, DType.U64))
    for k, v in table:
        if d == k:
            return v
    raise ValueError(f"MPI datatype {d!r} has no CCL equivalent")


def to_op(op: OpLike) -> Op:
    """A ccl Op from an Op, a name ('sum', 'prod', 'min', 'max', 'avg'), torch.distributed's
    ReduceOp (SUM, PRODUCT, MIN, MAX, AVG) or mpi4py's (MPI.SUM, ...)."""
    if isinstance(op, str):
        r = _OPS.get(op)
        if r is not None:
            return r
    if isinstance(op, Op):
        return op
    if isinstance(op, int) and not isinstance(op, bool):
        return Op(op)
    if isinstance(op, str):
        key = op.lower()
        if key in _OPS:
            return _OPS[key]
        raise ValueError(f"unknown op '{op}' (sum, prod, min, max, avg)")
    mod = type(op).__module__
    if mod.startswith("mpi4py"):
        from mpi4py import MPI

        for k, v in ((MPI.SUM, Op.SUM), (MPI.PROD, Op.PROD), (MPI.MIN, Op.MIN), (MPI.MAX, Op.MAX)):
            if op == k:
                return v
    # torch.distributed.ReduceOp and its RedOpType print as "ReduceOp.SUM" / "RedOpType.SUM".
    name = str(op).rsplit(".", 1)[-1].lower()
    if name in _OPS:
        return _OPS[name]
    raise ValueError(f"op {op!r} has no CCL equivalent (sum, prod, min, max, avg)")


# The C types' ranges, for int_arg.
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
SIZE_MAX = (1 << 64) - 1


def int_arg(fn: str, name: str, value: Any, lo: int, hi: int, what: str = "") -> int:
    """value as a Python int, checked before it reaches ctypes, which would wrap it
    silently (2**64 + 3 as a size_t is 3, 2**32 + 1 as an int is 1) or truncate it (1.9
    is 1). Integers only: int, numpy's, anything with __index__; not bool (True is a
    count of 1 by accident) nor float. ``what`` says what the range is ("a rank of this
    communicator"); raises TypeError or InvalidArgumentError naming fn and the argument."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        shown = repr(value) if isinstance(value, str) else str(value)
        raise TypeError(f"{fn}: {name} must be an integer, not {type(value).__name__} {shown}")
    v = operator.index(value)
    if not lo <= v <= hi:
        from ._errors import InvalidArgumentError

        raise InvalidArgumentError(f"{fn}: {name} is {v}, out of range: expected {lo}..{hi}" +
                                   (f" ({what})" if what else ""))
    return v
