"""Wrapping by the master key: a data key sealed for its tenant and id, the check row that tells
whether a master key is the store's, and the master key itself (parsed, or made in a file)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import tempfile
from pathlib import Path
from uuid import UUID, uuid5

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.base import NAMESPACE
from infra.keyring.errors import MasterKeyError

MASTER_KEY_FILE = "master.key"
#: The row that tells which master key the store's keys are sealed by (tenant '' is no tenant).
CHECK_ID = uuid5(NAMESPACE, "master key check")
CHECK_TEXT = b"palimpsest master key check"
WRONG_MASTER = ("the master key does not open this store's keys: "
                "set PALIMPSEST_MASTER_KEY to the key it was made with")


def wrap_key(master: bytes, tenant_id: str, key_id: UUID, key: bytes) -> bytes:
    """``key`` sealed by the master key: a 12-byte random nonce, then AES-GCM's ciphertext and tag;
    the tenant and key id are associated data, so a row moved to another tenant or id opens not."""
    nonce = os.urandom(12)
    return nonce + AESGCM(master).encrypt(nonce, key, f"{tenant_id}|{key_id}".encode())


def unwrap_key(master: bytes, tenant_id: str, key_id: UUID, wrapped: bytes) -> bytes:
    try:
        return AESGCM(master).decrypt(wrapped[:12], wrapped[12:], f"{tenant_id}|{key_id}".encode())
    except InvalidTag:
        raise MasterKeyError(f"erasure key {key_id} of tenant {tenant_id!r} does not open: "
                             f"{WRONG_MASTER}") from None


def parse_master_key(text: str, source: str) -> bytes:
    """32 bytes from base64 (standard or URL-safe) or 64 hex digits; MasterKeyError naming
    ``source`` (never the text) otherwise."""
    text = text.strip()
    if len(text) == 64:
        with contextlib.suppress(ValueError):
            return bytes.fromhex(text)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except binascii.Error:
        key = b""
    if len(key) != 32:
        raise MasterKeyError(f"{source} must be a 32-byte key: base64 (44 characters) or 64 hex digits")
    return key


def make_master_file(path: Path) -> bytes:
    """A new master key in ``path`` (0600), written whole before it appears; if another process
    made the file first, its key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = AESGCM.generate_key(bit_length=256)
    handle, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{MASTER_KEY_FILE}.")  # mode 0600
    try:
        with os.fdopen(handle, "w") as file:
            file.write(base64.b64encode(key).decode() + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.link(draft, path)
    except FileExistsError:
        return parse_master_key(path.read_text(), str(path))
    finally:
        os.unlink(draft)
    return key
