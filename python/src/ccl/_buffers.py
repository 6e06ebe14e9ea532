"""Buffers: what a collective accepts, reduced to (pointer, element count, dtype, device).

Accepted, in this order: torch tensors (CPU and CUDA), numpy arrays, anything with
``__cuda_array_interface__`` (CuPy, Numba, ...) or ``__array_interface__``, anything with
``__dlpack__``, raw pointers (ints, or ctypes pointers and arrays) for which the caller
gives ``count`` and ``datatype``, and anything with the buffer protocol (PEP 3118:
bytearray, bytes, array.array, memoryview, mmap), whose format gives the dtype. Buffers
must be contiguous and in this machine's byte order: a collective moves bytes. A buffer
that the call writes (``as_buf(..., writes=True)``) must be writable: a read-only
numpy array (``np.frombuffer`` over bytes, a ``mode='r'`` memmap), an interface that says
read-only, or a DLPack tensor flagged read-only is refused, naming the argument, before
any C call (writing there rewrites immutable data, or faults on a read-only mapping).

Two roads. ``array_info`` is the per-call fast one: for a plain torch tensor or numpy
array that is contiguous, writable (numpy) and of a CCL dtype it gives (pointer, element
count, dtype, CUDA device) as a tuple, without building an object; for anything else it
gives None, and ``as_buf`` takes the object, accepts it or says what is wrong with it.
Whatever ``array_info`` accepts, ``as_buf`` accepts with the same pointer, count and dtype.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ._errors import InvalidArgumentError
from ._types import _DLPACK, _TYPESTR, DType, byte_order_message, known_dtype, to_dtype


@dataclass
class Buf:
    ptr: int
    numel: int
    dtype: Optional[DType]
    cuda: bool              # device memory (the GPU backend's kind), as far as the object says
    device: int = -1        # CUDA device index, -1 unknown / host
    keep: Any = None        # what must stay alive while the pointer is used
    torch_tensor: Any = None

    @property
    def nbytes(self) -> int:
        return self.numel * (self.dtype.itemsize if self.dtype is not None else 1)


def _torch():
    return sys.modules.get("torch")


def _is_torch_tensor(obj: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(obj, t.Tensor)


def _read_only(what: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} is read-only ({why}), and this call writes its result there: pass a "
                                "writable buffer (a copy: np.array(x), bytearray(b))")


_NATIVE = "<" if sys.byteorder == "little" else ">"


def _from_interface(obj: Any, iface: dict, cuda: bool, what: str, writes: bool) -> Buf:
    shape = tuple(iface["shape"])
    typestr = iface["typestr"]
    if typestr[0] not in ("|", "=", _NATIVE):
        raise InvalidArgumentError(f"{what}: {byte_order_message(typestr)}")
    dtype = _TYPESTR.get(typestr[1:])
    if dtype is None:
        try:
            dtype = to_dtype(getattr(obj, "dtype", None))
        except (ValueError, TypeError):
            raise ValueError(f"{what}: element type '{typestr}' has no CCL equivalent") from None
    numel = 1
    for s in shape:
        numel *= s
    strides = iface.get("strides")
    if strides is not None and numel > 1:
        expect, ok = dtype.itemsize, True
        for s, st in zip(reversed(shape), reversed(strides)):
            if s != 1 and st != expect:
                ok = False
            expect *= s
        if not ok:
            raise ValueError(f"{what} is not contiguous (strides {tuple(strides)}); pass a contiguous copy")
    ptr = iface["data"][0] or 0
    if iface["data"][1] and writes:
        raise _read_only(what, "its array interface says so")
    return Buf(ptr, numel, dtype, cuda, keep=obj)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype, _capsule_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


class _DLManagedVersioned(ctypes.Structure):
    """DLPack 1.0's DLManagedTensorVersioned, up to its tensor."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_DLPACK_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY


def _from_dlpack(obj: Any, what: str, writes: bool) -> Buf:
    # DLPack 1.0's versioned capsule where the producer gives one: it says whether the
    # tensor is read-only. An older producer's capsule cannot say; its tensor is taken as
    # writable. The capsule stays unconsumed, so its destructor releases the producer's
    # tensor when our reference (Buf.keep) goes.
    try:
        cap = obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0: no max_version
        cap = obj.__dlpack__()
    if _capsule_valid(cap, b"dltensor_versioned"):
        m = _DLManagedVersioned.from_address(_capsule_ptr(cap, b"dltensor_versioned"))
        if writes and m.flags & _DLPACK_READ_ONLY:
            raise _read_only(what, "its DLPack capsule is flagged read-only")
        t = m.dl_tensor
    else:
        t = _DLTensor.from_address(_capsule_ptr(cap, b"dltensor"))  # DLManagedTensor starts with its DLTensor
    key = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or key not in _DLPACK:
        raise ValueError(f"{what}: DLPack type (code {key[0]}, {key[1]} bits, {t.dtype.lanes} lanes) has no CCL "
                         "equivalent")
    dtype = _DLPACK[key]
    shape = [t.shape[i] for i in range(t.ndim)]
    numel = 1
    for s in shape:
        numel *= s
    if t.strides and numel > 1:
        expect = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and t.strides[i] != expect:
                raise ValueError(f"{what} is not contiguous; pass a contiguous copy")
            expect *= shape[i]
    cuda = t.device.device_type in (2, 13)  # kDLCUDA, kDLCUDAManaged
    return Buf((t.data or 0) + t.byte_offset, numel, dtype, cuda, t.device.device_id if cuda else -1, keep=(obj, cap))


# (pointer, element count, dtype, CUDA device index or -1 for host memory).
ArrayInfo = tuple[int, int, DType, int]

_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer


def _torch_info(t: Any) -> Optional[ArrayInfo]:
    if not t.is_contiguous() or t.is_neg():
        return None
    dt = known_dtype(t.dtype)
    if dt is None:
        return None
    return t.data_ptr(), t.numel(), dt, t.get_device() if t.is_cuda else -1


def _numpy_info(a: Any) -> Optional[ArrayInfo]:
    # c_char.from_buffer takes a writable, contiguous, non-empty buffer: a third of the
    # cost of a.ctypes.data. Read-only and empty arrays take as_buf's road.
    flags = a.flags
    if not (flags.c_contiguous and flags.writeable) or not a.size:
        return None
    dt = known_dtype(a.dtype)
    if dt is None:
        return None
    return _addressof(_from_buffer(a)), a.size, dt, -1


def _no_info(obj: Any) -> None:
    return None


# Per type: its array_info function. Exact types only: a subclass may override what the
# fast road reads (torch's FakeTensor, numpy's matrix), so it goes through as_buf.
_INFO: dict[type, Callable[[Any], Optional[ArrayInfo]]] = {}


def _info_for(tp: type) -> Callable[[Any], Optional[ArrayInfo]]:
    t, np = sys.modules.get("torch"), sys.modules.get("numpy")
    if t is not None and (tp is t.Tensor or tp is t.nn.Parameter):
        f: Callable[[Any], Optional[ArrayInfo]] = _torch_info
    elif np is not None and tp is np.ndarray:
        f = _numpy_info
    else:
        f = _no_info
    if len(_INFO) < 64:
        _INFO[tp] = f
    return f


def array_info(obj: Any) -> Optional[ArrayInfo]:
    """(pointer, element count, dtype, CUDA device or -1) of a plain contiguous torch tensor
    or writable C-contiguous numpy array of a CCL dtype; None for anything else (as_buf
    then decides)."""
    f = _INFO.get(type(obj))
    if f is None:
        f = _info_for(type(obj))
    return f(obj)


def as_buf(obj: Any, what: str, writes: bool = False) -> Buf:
    """The buffer behind obj (see the module's docstring); raises TypeError/ValueError
    naming the argument. ``writes``: the call writes into it, so it must be writable."""
    t = sys.modules.get("torch")
    if t is not None and isinstance(obj, t.Tensor):
        if not obj.is_contiguous():
            raise ValueError(f"{what} is not contiguous; pass tensor.contiguous() (and copy the result back)")
        if obj.is_neg() or obj.is_conj():  # lazy views: the memory holds other numbers
            raise ValueError(f"{what} is a lazy negated or conjugated view; pass tensor.resolve_neg() / "
                             "resolve_conj()")
        try:
            dtype = to_dtype(obj.dtype)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        cuda = obj.is_cuda
        return Buf(obj.data_ptr(), obj.numel(), dtype, cuda, obj.get_device() if cuda else -1, keep=obj,
                   torch_tensor=obj)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise ValueError(f"{what} is not C-contiguous (strides {obj.strides} for shape {obj.shape}); pass "
                             "np.ascontiguousarray(...) (and copy the result back)")
        if not obj.dtype.isnative:
            raise InvalidArgumentError(f"{what}: {byte_order_message(str(obj.dtype))}")
        if writes and not obj.flags.writeable:
            raise _read_only(what, "numpy's flags.writeable is False")
        try:
            dtype = to_dtype(obj.dtype)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        return Buf(obj.ctypes.data, obj.size, dtype, False, keep=obj)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_interface(obj, cai, True, what, writes)
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        return _from_interface(obj, ai, False, what, writes)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, what, writes)
    if isinstance(obj, int) and not isinstance(obj, bool):
        return Buf(obj, -1, None, False)
    if isinstance(obj, ctypes.c_void_p):
        return Buf(obj.value or 0, -1, None, False)
    if isinstance(obj, (ctypes._Pointer, ctypes.Array)):  # type: ignore[attr-defined]
        return Buf(ctypes.cast(obj, ctypes.c_void_p).value or 0, -1, None, False, keep=obj)
    if obj is None:
        return Buf(0, -1, None, False)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"{what}: {type(obj).__name__} is not a buffer CCL can use (a torch tensor, numpy array, "
                        "an object with __cuda_array_interface__, __array_interface__, __dlpack__ or the buffer "
                        "protocol, or an int pointer with count= and datatype=)") from None
    return _from_buffer_protocol(obj, view, what, writes)


# PEP 3118 formats (struct module codes) with a CCL dtype; the C integer types by size
# (int and long differ between platforms), signed and unsigned.
_FORMATS = {"f": DType.F32, "d": DType.F64, "e": DType.F16, "B": DType.U8, "c": DType.U8, "b": DType.I8}
_SIGNED = {"i", "l", "q", "n"}
_UNSIGNED = {"I", "L", "Q", "N"}
_BY_SIZE = {(True, 4): DType.I32, (True, 8): DType.I64, (False, 4): DType.U32, (False, 8): DType.U64}


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer: a buffer export, held while the pointer is used."""

    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.restype, _get_buffer.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.restype, _release_buffer.argtypes = None, [ctypes.POINTER(_PyBuffer)]


class _Export:
    """A buffer export of a contiguous object (PyBUF_SIMPLE): its address, released when
    this goes. While it lives the exporter cannot move or resize the memory (a bytearray
    refuses to grow)."""

    def __init__(self, view: memoryview):
        self._b = _PyBuffer()
        _get_buffer(view, ctypes.byref(self._b), 0)
        self.ptr = self._b.buf or 0

    def __del__(self) -> None:
        _release_buffer(ctypes.byref(self._b))


def _buffer_dtype(fmt: str, itemsize: int, what: str) -> DType:
    order, code = (fmt[0], fmt[1:]) if fmt[:1] in "@=<>!" else ("@", fmt)
    swapped = order in ">!" if sys.byteorder == "little" else order == "<"
    if swapped:
        raise InvalidArgumentError(f"{what}: {byte_order_message(fmt)}")
    if code in _FORMATS and itemsize == _FORMATS[code].itemsize:
        return _FORMATS[code]
    if (code in _SIGNED or code in _UNSIGNED) and (code in _SIGNED, itemsize) in _BY_SIZE:
        return _BY_SIZE[(code in _SIGNED, itemsize)]
    raise ValueError(f"{what}: buffer format '{fmt}' ({itemsize}-byte items) has no CCL equivalent (f32 'f', "
                     "f64 'd', f16 'e', i32/i64 'i' 'l' 'q', u32/u64 'I' 'L' 'Q', i8 'b', u8 'B')")


def _from_buffer_protocol(obj: Any, view: memoryview, what: str, writes: bool) -> Buf:
    if not view.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous (a strided memoryview); pass a contiguous copy "
                         "(bytearray(view), view.tobytes())")
    if writes and view.readonly:
        raise _read_only(what, f"a {type(obj).__name__} buffer")
    dtype = _buffer_dtype(view.format, view.itemsize, what)
    numel = view.nbytes // dtype.itemsize
    exp = _Export(view) if view.nbytes else None
    return Buf(exp.ptr if exp else 0, numel, dtype, False, keep=(obj, view, exp))
