"""Scopes that match the harm, in process (no database): which scope each erasure unit needs, the
key ``serve`` makes for a newcomer, who may scrape ``/metrics``, and what ``/ready`` keeps to
itself (no exception text, no address)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr

from domain.errors import AuthenticationError, PermissionDeniedError
from infra.settings import Settings
from services.entrypoints import readiness
from services.entrypoints.metrics import authorize_scrape
from services.entrypoints.operations import OPERATIONS
from services.entrypoints.serve import default_key
from services.keys import SCOPES, MemoryKeyStore, Principal

#: What each unit of ``forget`` names.
UNITS: dict[str, dict[str, Any]] = {
    "card": {"card_id": "6f1c1a52-8d1e-4c43-9c55-2f7f5d6f0a01"},
    "slot": {"subject": "user", "label": "address"},
    "subject": {"subject": "alice"},
    "session": {"session_id": "chat-1"},
    "tenant": {},
}
NEEDS = {"card": "memory:write", "slot": "memory:write", "subject": "memory:erase",
         "session": "memory:erase", "tenant": "memory:erase"}
HOLDERS = {"memory:write": {"memory:write", "memory:admin"}, "memory:erase": {"memory:erase"}}


def keys() -> MemoryKeyStore:
    return MemoryKeyStore(None, lambda: datetime.now(UTC))


@pytest.mark.parametrize("unit", list(UNITS))
@pytest.mark.parametrize("scope", SCOPES)
def test_forget_needs_write_for_a_card_or_slot_and_erase_for_the_rest(unit: str, scope: str) -> None:
    services: Any = SimpleNamespace(settings=Settings(persistence="memory"))
    who = Principal(tenant_id="acme", scopes=frozenset({scope}), key_id="key_1")
    payload = {"unit": unit, **UNITS[unit]}
    if scope in HOLDERS[NEEDS[unit]]:
        assert OPERATIONS["forget"].authorize(services, who, payload).unit == unit
    else:
        with pytest.raises(PermissionDeniedError, match=NEEDS[unit]):
            OPERATIONS["forget"].authorize(services, who, payload)


def test_the_newcomers_key_holds_every_scope_erase_included_and_is_made_once() -> None:
    store = keys()
    key_id, secret = default_key(store)
    assert secret is not None
    assert store.authenticate(secret).scopes == frozenset(SCOPES)
    assert default_key(store) == (key_id, None)  # a secret is never shown twice


def scraping(token: str | None) -> tuple[Any, MemoryKeyStore]:
    store = keys()
    settings = Settings(persistence="memory",
                        metrics_token=SecretStr(token) if token is not None else None)
    return SimpleNamespace(settings=settings, keys=store), store


def test_metrics_let_in_an_admin_key_or_the_metrics_token_only() -> None:
    services, store = scraping("prom-secret-token")
    authorize_scrape(services, "prom-secret-token")
    authorize_scrape(services, store.create("acme", ("memory:admin",))[1])
    for scopes in (("memory:read", "memory:write"), ("memory:erase",)):
        with pytest.raises(PermissionDeniedError, match="memory:admin"):
            authorize_scrape(services, store.create("acme", scopes)[1])
    for wrong in (None, "", "prom-secret-tokeN", "pk_" + "x" * 43):
        with pytest.raises(AuthenticationError):
            authorize_scrape(services, wrong)


def test_a_blank_metrics_token_opens_nothing() -> None:
    services, _ = scraping("")
    with pytest.raises(AuthenticationError):
        authorize_scrape(services, "")


class _Refusing:
    """A pool whose connection fails with a message naming the server and the role."""

    def connection(self, timeout: float) -> Any:
        raise psycopg.OperationalError('connection to server at "10.9.8.7", port 5432 failed: '
                                       'password authentication failed for user "palimpsest_rt"')


def test_ready_says_why_without_the_databases_text_or_any_address(tmp_path: Any) -> None:
    settings = Settings(persistence="memory", data_dir=tmp_path, kafka_bootstrap="10.9.8.7:9092",
                        llm_base_url="http://10.9.8.7:8000/v1")
    services: Any = SimpleNamespace(settings=settings,
                                    queries=SimpleNamespace(read=SimpleNamespace(pool=_Refusing())))

    def unreachable(address: Any, timeout: float) -> Any:
        raise ConnectionRefusedError(f"[Errno 111] Connection refused: {address}")

    broker = readiness._broker(services, connect=unreachable)
    report = readiness.readiness(services)
    text = str(report.to_dict()) + broker.detail
    assert not report.ready and not broker.ok
    assert report.checks["database"].detail == "does not answer as the runtime role"
    assert broker.detail.startswith("unreachable")
    assert report.checks["extraction"].ok and report.checks["extraction"].detail.startswith("on")
    for secret in ("10.9.8.7", "5432", "9092", "palimpsest_rt", "password", "8000", "http"):
        assert secret not in text, secret
