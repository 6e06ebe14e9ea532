"""The unique id of libccl's TCP bootstrap (ccl.get_unique_id, ccl.UniqueId;
docs/multinode.md): its bytes, hex and pickle; a root address that names nothing."""
import pickle

import pytest

import ccl

# What the caller's shell may set that changes where the root listens.
_CLEAN = ("CCL_BOOTSTRAP_ADDR", "CCL_SOCKET_IFNAME", "CCL_RANKS_PER_NODE")


# ---- the id as a value ----

def test_id_bytes_hex_and_pickle_round_trip():
    uid = ccl.get_unique_id()
    data = bytes(uid)
    assert isinstance(data, bytes) and len(data) == ccl.UNIQUE_ID_BYTES == 128
    assert ccl.UniqueId(data) == uid and hash(ccl.UniqueId(data)) == hash(uid)
    assert ccl.UniqueId(bytearray(data)) == ccl.UniqueId(memoryview(data)) == ccl.UniqueId(uid) == uid
    assert ccl.UniqueId.fromhex(uid.hex()) == uid and len(uid.hex()) == 256
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(uid, protocol=proto))
        assert isinstance(back, ccl.UniqueId) and back == uid and bytes(back) == data
    assert ccl.get_unique_id() != uid  # another root: another port or cookie
    assert uid != data  # an id is not its bytes (compare bytes(uid))
    assert data.hex() not in repr(uid) and "128 bytes" in repr(uid)  # the cookie stays out of logs


def test_id_of_the_wrong_size_or_type():
    with pytest.raises(ccl.InvalidArgumentError, match=r"ccl.UniqueId: 127 bytes, expected 128"):
        ccl.UniqueId(bytes(127))
    with pytest.raises(TypeError, match=r"not str; for hex text use ccl.UniqueId.fromhex"):
        ccl.UniqueId("00" * 128)
    with pytest.raises(TypeError, match=r"not int"):
        ccl.UniqueId(128)
    with pytest.raises(ccl.InvalidArgumentError, match=r"ccl.UniqueId.fromhex: not hex text"):
        ccl.UniqueId.fromhex("zz" * 128)


# ---- where the root listens ----

@pytest.mark.parametrize("var,value,cls,msg", [
    ("CCL_BOOTSTRAP_ADDR", "no-such-host.invalid", ccl.InvalidArgumentError,
     r"ccl_get_unique_id: CCL_BOOTSTRAP_ADDR='no-such-host.invalid': cannot resolve 'no-such-host.invalid'"),
    ("CCL_BOOTSTRAP_ADDR", "127.0.0.1:99999", ccl.InvalidArgumentError, r"'99999' is not a port"),
    ("CCL_SOCKET_IFNAME", "nosuchif", ccl.InvalidArgumentError,
     r"CCL_SOCKET_IFNAME='nosuchif' admits no interface of this host"),
], ids=["unresolvable", "bad-port", "no-interface"])
def test_root_address_that_names_nothing(monkeypatch, var, value, cls, msg):
    for k in _CLEAN:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(var, value)
    with pytest.raises(cls, match=msg):
        ccl.get_unique_id()
