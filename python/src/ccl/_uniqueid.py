"""The unique id of libccl's TCP bootstrap (``ccl_unique_id_t``), as a Python value.

One process calls :func:`ccl.get_unique_id` (``ccl_get_unique_id``: it opens the root, a
listening TCP socket served by a thread of that process) and hands the id to every rank
by its own means; every rank then passes it to ``ccl.init_rank(rank, nranks,
unique_id=uid)`` (``ccl_comm_init_rank_id``). The id is 128 opaque bytes: where the root
listens and a random cookie. :class:`UniqueId` holds them; it converts to and from
``bytes`` (``bytes(uid)``, ``ccl.UniqueId(data)``) and hex, pickles (torch.distributed's
``broadcast_object_list``, mpi4py's ``bcast``, a multiprocessing queue), and compares by
value. What the bytes mean is libccl's business: it checks them when a rank uses them
(an id it did not make, or a damaged one, is refused there, with a message).
"""
from __future__ import annotations

from typing import Any

from ._errors import InvalidArgumentError
from ._lib import UNIQUE_ID_BYTES, ccl_unique_id_t


class UniqueId:
    """The 128 bytes of a ``ccl_unique_id_t``. ``UniqueId(data)`` takes exactly
    :data:`UNIQUE_ID_BYTES` bytes (``bytes``, ``bytearray``, ``memoryview``, or another
    ``UniqueId``); ``bytes(uid)`` gives them back."""

    __slots__ = ("_data",)

    def __init__(self, data: Any):
        if isinstance(data, UniqueId):
            data = data._data
        if isinstance(data, str) or not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"ccl.UniqueId: expected the {UNIQUE_ID_BYTES} bytes of an id (bytes(uid) of "
                            f"ccl.get_unique_id()), not {type(data).__name__}" +
                            ("; for hex text use ccl.UniqueId.fromhex" if isinstance(data, str) else ""))
        b = bytes(data)
        if len(b) != UNIQUE_ID_BYTES:
            raise InvalidArgumentError(f"ccl.UniqueId: {len(b)} bytes, expected {UNIQUE_ID_BYTES} (hand every rank "
                                       "all the bytes of bytes(uid), unchanged)")
        self._data = b

    @classmethod
    def fromhex(cls, text: str) -> "UniqueId":
        """From :meth:`hex`'s text (for an environment variable or a command line)."""
        try:
            data = bytes.fromhex(text)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"ccl.UniqueId.fromhex: not hex text: {e}") from None
        return cls(data)

    def hex(self) -> str:
        """The bytes as 256 hex digits."""
        return self._data.hex()

    def __bytes__(self) -> bytes:
        return self._data

    def __reduce__(self) -> tuple:
        return (UniqueId, (self._data,))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UniqueId):
            return NotImplemented
        return other._data == self._data

    def __hash__(self) -> int:
        return hash(self._data)

    def __repr__(self) -> str:
        # Not the bytes: they hold the cookie that keeps other jobs' ranks out.
        return f"<ccl.UniqueId ({UNIQUE_ID_BYTES} bytes)>"

    def _c(self) -> ccl_unique_id_t:
        return ccl_unique_id_t.from_buffer_copy(self._data)
