"""Node identity: key file lifecycle, permissions, corruption, id derivation."""

import hashlib
import os
import stat

import pytest

from dht.errors import IdentityError, LocalError
from dht.identity import NODE_ID_BYTES, NodeIdentity, node_id_for, verify_signature
from dht.key_file import KEY_FILE_NAME, load_or_create


def test_created_with_mode_0600_and_reused(tmp_path):
    first = load_or_create(tmp_path / "data")
    path = tmp_path / "data" / KEY_FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = load_or_create(tmp_path / "data")
    assert second.node_id == first.node_id
    assert second.public_key == first.public_key


def test_node_id_is_truncated_sha256_of_public_key():
    identity = NodeIdentity.generate()
    assert len(identity.node_id) == NODE_ID_BYTES
    assert identity.node_id == hashlib.sha256(identity.public_key).digest()[:20] == node_id_for(identity.public_key)


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage", b"swarmproxy-ed25519-v1\n" + b"x" * 31, b"swarmproxy-ed25519-v2\n" + b"x" * 32,
     b"swarmproxy-ed25519-v1\n" + b"x" * 33],
)
def test_corrupt_key_file_is_a_clear_local_error(tmp_path, content):
    (tmp_path / KEY_FILE_NAME).write_bytes(content)
    with pytest.raises(IdentityError, match="corrupt") as info:
        load_or_create(tmp_path)
    assert isinstance(info.value, LocalError)
    assert (tmp_path / KEY_FILE_NAME).read_bytes() == content  # never silently replaced


def test_loose_permissions_are_tightened(tmp_path):
    load_or_create(tmp_path)
    path = tmp_path / KEY_FILE_NAME
    os.chmod(path, 0o644)
    load_or_create(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_signatures():
    identity, other = NodeIdentity.generate(), NodeIdentity.generate()
    signature = identity.sign(b"message")
    assert verify_signature(identity.public_key, signature, b"message")
    assert not verify_signature(identity.public_key, signature, b"messagE")
    assert not verify_signature(other.public_key, signature, b"message")
    assert not verify_signature(b"short", signature, b"message")
    assert not verify_signature(identity.public_key, b"\x00" * 64, b"message")
    assert not verify_signature(b"\xff" * 32, signature, b"message")  # not a curve point: False, not raise
