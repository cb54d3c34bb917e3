"""API keys: who a caller is, from the key alone.

A key belongs to one tenant and carries scopes (``memory:read``, ``memory:write``,
``memory:admin``, ``memory:erase``): admin implies read and write; ``memory:erase`` — forgetting a
whole tenant — is held only by a key it was granted to by name, admin or not. The secret — ``pk_``
and 32 random bytes — is shown once when the key is made; only its hash is kept (HMAC-SHA-256 with
``PALIMPSEST_KEY_PEPPER``, or SHA-256 without one). Every request is checked against the store, so
a revoked key is refused at once, in every process.

The store also keeps the console sessions signed out (:meth:`KeyStore.end_session`): a session
cookie is a sealed copy of a key, so signing out records the session's id, its tenant and when its
seal expires; the console refuses an ended session on every request, in every worker, and expired
rows are pruned at each sign-out.

A key's check binds its tenant to the request (:mod:`infra.tenancy`): the database work that
follows sees that tenant's rows only. ``KeyStore`` is the port; ``PostgresKeyStore`` keeps the keys
in the event schema's ``api_keys`` table (a role may read its tenant's, add one and set
``revoked_at``, nothing else; a secret is looked up through ``api_key_by_hash``, before any tenant
is known);
``MemoryKeyStore`` keeps them in the process, for ``PALIMPSEST_PERSISTENCE=memory``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from domain.errors import (
    AuthenticationError,
    InvalidCommandError,
    NotFoundError,
    PermissionDeniedError,
)
from domain.values import check_tenant
from infra.postgres import KEYS_TABLE, SESSIONS_ENDED_TABLE, Database
from infra.tenancy import bind_tenant, tenant_checked

SCOPES = ("memory:read", "memory:write", "memory:admin", "memory:erase")
#: What a key gets when no scope is named.
DEFAULT_SCOPES = ("memory:read", "memory:write")
#: What ``memory:admin`` holds besides itself: not ``memory:erase``, which is granted only by name.
ADMIN_HOLDS = frozenset({"memory:read", "memory:write"})
SECRET_PREFIX = "pk_"
MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class Principal:
    """The caller of one request: the key's tenant and scopes."""

    tenant_id: str
    scopes: frozenset[str]
    key_id: str


@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    tenant_id: str
    scopes: tuple[str, ...]
    name: str
    created_at: datetime
    revoked_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {"key_id": self.key_id, "tenant_id": self.tenant_id, "scopes": list(self.scopes),
                "name": self.name, "created_at": self.created_at.isoformat(),
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None}


def require(principal: Principal, scope: str) -> None:
    """Refuse (PermissionDeniedError) unless the key holds ``scope``; admin holds read and write
    too, never ``memory:erase``."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")
    bind_tenant(principal.tenant_id)  # what this request's database work is for (decision 0018)
    held = scope in principal.scopes or (
        "memory:admin" in principal.scopes and scope in ADMIN_HOLDS)
    if not held:
        raise PermissionDeniedError(f"this key lacks the scope {scope!r}")


def check_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    wanted = tuple(dict.fromkeys(scopes)) or DEFAULT_SCOPES
    unknown = [s for s in wanted if s not in SCOPES]
    if unknown:
        raise InvalidCommandError(f"unknown scope {unknown[0]!r}; expected any of {', '.join(SCOPES)}")
    return tuple(s for s in SCOPES if s in wanted)


class KeyStore(ABC):
    def __init__(self, pepper: str | None, clock: Callable[[], datetime]) -> None:
        self._pepper = pepper.encode() if pepper else None
        self._clock = clock

    def create(self, tenant_id: str, scopes: Iterable[str] = (), name: str = "",
               ) -> tuple[KeyInfo, str]:
        """A new key for ``tenant_id``: its description and the secret (shown once, kept hashed)."""
        check_tenant(tenant_id)
        if len(name) > MAX_NAME_CHARS:
            raise InvalidCommandError(f"a key's name holds at most {MAX_NAME_CHARS} characters")
        info = KeyInfo(key_id="key_" + secrets.token_hex(8), tenant_id=tenant_id,
                       scopes=check_scopes(scopes), name=name, created_at=self._clock(),
                       revoked_at=None)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        self._insert(info, self._hash(secret))
        return info, secret

    def authenticate(self, secret: str | None) -> Principal:
        """The principal of ``secret``; AuthenticationError when missing, unknown or revoked."""
        if not secret:
            raise AuthenticationError("no API key: send 'Authorization: Bearer <key>'")
        info = self._find(self._hash(secret)) if secret.startswith(SECRET_PREFIX) else None
        if info is None:
            raise AuthenticationError("unknown API key")
        if info.revoked_at is not None:
            raise AuthenticationError("this API key was revoked")
        bind_tenant(info.tenant_id)
        return Principal(tenant_id=info.tenant_id, scopes=frozenset(info.scopes), key_id=info.key_id)

    def revoke(self, key_id: str) -> KeyInfo:
        """Revoke a key (at once; revoking a revoked key changes nothing)."""
        info = self._revoke(key_id, self._clock())
        if info is None:
            raise NotFoundError(f"no API key {key_id!r}")
        return info

    def end_session(self, session_id: str, tenant_id: str, expires_at: datetime) -> None:
        """Record a console session signed out, refused until ``expires_at`` (when its seal
        expires anyway); sessions ended and expired by now are forgotten."""
        self._end_session(session_id, tenant_id, expires_at, self._clock())

    @abstractmethod
    def session_ended(self, session_id: str, tenant_id: str) -> bool:
        """Whether the console session ``session_id`` of ``tenant_id`` was signed out."""

    @abstractmethod
    def _end_session(self, session_id: str, tenant_id: str, expires_at: datetime,
                     now: datetime) -> None: ...

    @abstractmethod
    def list(self, tenant_id: str | None = None) -> list[KeyInfo]:
        """The keys (of one tenant), oldest first, revoked ones included."""

    @abstractmethod
    def close(self) -> None:
        """Release what the store holds."""

    def _hash(self, secret: str) -> bytes:
        data = secret.encode("utf-8", "surrogatepass")
        if self._pepper is None:
            return hashlib.sha256(data).digest()
        return hmac.new(self._pepper, data, hashlib.sha256).digest()

    @abstractmethod
    def _insert(self, info: KeyInfo, secret_hash: bytes) -> None: ...

    @abstractmethod
    def _find(self, secret_hash: bytes) -> KeyInfo | None: ...

    @abstractmethod
    def _revoke(self, key_id: str, at: datetime) -> KeyInfo | None: ...


class MemoryKeyStore(KeyStore):
    def __init__(self, pepper: str | None, clock: Callable[[], datetime]) -> None:
        super().__init__(pepper, clock)
        self._keys: dict[str, tuple[KeyInfo, bytes]] = {}
        self._ended: dict[tuple[str, str], datetime] = {}
        self._lock = threading.Lock()

    def session_ended(self, session_id: str, tenant_id: str) -> bool:
        with self._lock:
            return (tenant_id, session_id) in self._ended

    def _end_session(self, session_id: str, tenant_id: str, expires_at: datetime,
                     now: datetime) -> None:
        with self._lock:
            self._ended = {k: until for k, until in self._ended.items() if until > now}
            self._ended[(tenant_id, session_id)] = expires_at

    def close(self) -> None:
        with self._lock:
            self._keys.clear()

    def list(self, tenant_id: str | None = None) -> list[KeyInfo]:
        with self._lock:
            return [info for info, _ in self._keys.values()
                    if tenant_id is None or info.tenant_id == tenant_id]

    def _insert(self, info: KeyInfo, secret_hash: bytes) -> None:
        with self._lock:
            self._keys[info.key_id] = (info, secret_hash)

    def _find(self, secret_hash: bytes) -> KeyInfo | None:
        with self._lock:
            return next((info for info, known in self._keys.values()
                         if hmac.compare_digest(known, secret_hash)), None)

    def _revoke(self, key_id: str, at: datetime) -> KeyInfo | None:
        with self._lock:
            if key_id not in self._keys:
                return None
            info, secret_hash = self._keys[key_id]
            if info.revoked_at is None:
                info = replace(info, revoked_at=at)
                self._keys[key_id] = (info, secret_hash)
            return info


_COLUMNS = "key_id, tenant_id, scopes, name, created_at, revoked_at"


class PostgresKeyStore(KeyStore):
    """The keys in ``<event schema>.api_keys``, as the runtime role."""

    def __init__(self, db: Database, schema: str, pepper: str | None,
                 clock: Callable[[], datetime], pool_size: int = 2) -> None:
        super().__init__(pepper, clock)
        self._table = sql.Identifier(schema, KEYS_TABLE)
        self._ended = sql.Identifier(schema, SESSIONS_ENDED_TABLE)
        self._pool = ConnectionPool(
            kwargs={"host": db.host, "port": db.port, "dbname": db.dbname, "user": db.user,
                    "password": db.password, "row_factory": dict_row, "autocommit": True},
            min_size=1, max_size=pool_size, open=True, check=tenant_checked)
        self._lookup = sql.Identifier(schema, "api_key_by_hash")

    def close(self) -> None:
        self._pool.close()

    def list(self, tenant_id: str | None = None) -> list[KeyInfo]:
        query = sql.SQL("SELECT " + _COLUMNS + " FROM {} WHERE %(tenant)s::text IS NULL "
                        "OR tenant_id = %(tenant)s ORDER BY created_at, key_id").format(self._table)
        with self._pool.connection() as conn:
            return [_info(row) for row in conn.execute(query, {"tenant": tenant_id}).fetchall()]

    def session_ended(self, session_id: str, tenant_id: str) -> bool:
        query = sql.SQL("SELECT 1 FROM {} WHERE tenant_id = %s AND session_id = %s").format(
            self._ended)
        with self._pool.connection() as conn:
            return conn.execute(query, (tenant_id, session_id)).fetchone() is not None

    def _end_session(self, session_id: str, tenant_id: str, expires_at: datetime,
                     now: datetime) -> None:
        record = sql.SQL("INSERT INTO {} (session_id, tenant_id, expires_at) VALUES (%s, %s, %s) "
                         "ON CONFLICT (session_id) DO NOTHING").format(self._ended)
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(sql.SQL("DELETE FROM {} WHERE expires_at <= %s").format(self._ended), (now,))
            conn.execute(record, (session_id, tenant_id, expires_at))

    def _insert(self, info: KeyInfo, secret_hash: bytes) -> None:
        statement = sql.SQL("INSERT INTO {} (key_id, tenant_id, scopes, name, created_at, "
                            "secret_hash) VALUES (%s, %s, %s, %s, %s, %s)").format(self._table)
        with self._pool.connection() as conn:
            conn.execute(statement, (info.key_id, info.tenant_id, list(info.scopes), info.name,
                                     info.created_at, secret_hash))

    def _find(self, secret_hash: bytes) -> KeyInfo | None:
        query = sql.SQL("SELECT " + _COLUMNS + " FROM {}(%s)").format(self._lookup)  # no tenant yet
        with self._pool.connection() as conn:
            row = conn.execute(query, (secret_hash,)).fetchone()
        return _info(row) if row else None

    def _revoke(self, key_id: str, at: datetime) -> KeyInfo | None:
        statement = sql.SQL("UPDATE {} SET revoked_at = coalesce(revoked_at, %s) WHERE key_id = %s "
                            "RETURNING " + _COLUMNS).format(self._table)
        with self._pool.connection() as conn:
            row = conn.execute(statement, (at, key_id)).fetchone()
        return _info(row) if row else None


def _info(row: Any) -> KeyInfo:
    return KeyInfo(key_id=row["key_id"], tenant_id=row["tenant_id"], scopes=tuple(row["scopes"]),
                   name=row["name"], created_at=row["created_at"], revoked_at=row["revoked_at"])
