"""Erasure units and subjects: what a data key protects and what an erasure finds it by, and the
keyed hash a subject is stored as (never in plain)."""

from __future__ import annotations

import hashlib
import hmac
import unicodedata
from dataclasses import dataclass, field
from typing import Literal, get_args
from uuid import UUID, uuid5

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from domain.base import NAMESPACE

KeyKind = Literal["card", "slot", "case", "proposal", "turn", "tenant"]
KEY_KINDS: tuple[str, ...] = get_args(KeyKind)

_TENANT_UNITS = uuid5(NAMESPACE, "erasure unit of a tenant")


@dataclass(frozen=True)
class Unit:
    """What a data key protects, and what an erasure finds it by."""

    kind: KeyKind
    #: The card / slot / case / proposal / ingestion (turn) id; for "tenant": tenant_unit(tenant_id).
    id: UUID
    #: A card's or case's slot, when known.
    slot_id: UUID | None = None
    #: A slot's subject, in plain; stored only as a keyed hash (:func:`subject_ref`).
    subject: str | None = field(default=None, repr=False)
    #: The ingested session (a caller's session id) a card or turn came from.
    session: str | None = None
    #: Other cards whose text the key protects (a proposal's src/dst; a turn's event card); for a
    #: card written from an ingested turn, that turn's id (its speaker's erasure reaches it: the
    #: key table copies the turn's speaker onto the card's key, ``said_by``).
    cards: tuple[UUID, ...] = ()


@dataclass(frozen=True)
class Found:
    """A live key an erasure selected."""

    key_id: UUID
    kind: KeyKind
    unit_id: UUID
    slot_id: UUID | None


def tenant_unit(tenant_id: str) -> UUID:
    """The unit id of the tenant-wide key of ``tenant_id``."""
    return uuid5(_TENANT_UNITS, tenant_id)


def subject_ref_key(master: bytes) -> bytes:
    """The key subject refs are made with, derived from the master key."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=b"palimpsest subject ref").derive(master)


def fold_subject(subject: str) -> str:
    """NFKC, case folded, runs of white space as one space: how a subject is compared."""
    return " ".join(unicodedata.normalize("NFKC", subject).casefold().split())


def subject_ref(ref_key: bytes, tenant_id: str, subject: str) -> bytes:
    """A keyed hash of a tenant's subject: equal for equal folded subjects, and nothing else."""
    text = f"{tenant_id}\x1f{fold_subject(subject)}".encode()
    return hmac.new(ref_key, text, hashlib.sha256).digest()
