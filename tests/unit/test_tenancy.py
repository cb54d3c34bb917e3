"""The request's tenant (decision 0018): bound per context, applied to a pooled connection once
per change of tenant, and a group commit's decisions cut into one run per tenant."""

from __future__ import annotations

import threading
from typing import Any

from psycopg.pq import TransactionStatus

from infra.tenancy import acting_for, apply_tenant, bind_tenant, current_tenant
from infra.tenant_runs import runs_of


class FakeConnection:
    """What :func:`apply_tenant` reads of a connection, and the statements it was sent."""

    def __init__(self, autocommit: bool = True) -> None:
        self.autocommit = autocommit
        self.info = type("Info", (), {"transaction_status": TransactionStatus.IDLE})()
        self.sent: list[tuple[Any, ...]] = []

    def execute(self, query: str, params: tuple[Any, ...]) -> None:
        self.sent.append(params)


def test_an_idle_connection_is_sent_the_tenant_once_per_change() -> None:
    conn = FakeConnection()
    with acting_for("a"):
        apply_tenant(conn)  # type: ignore[arg-type]
        apply_tenant(conn)  # type: ignore[arg-type]
    with acting_for("b"):
        apply_tenant(conn)  # type: ignore[arg-type]
    with acting_for(None):  # none bound: the empty tenant, nothing readable
        apply_tenant(conn)  # type: ignore[arg-type]
    assert conn.sent == [("a", False), ("b", False), ("", False)]


def test_inside_a_transaction_the_tenant_is_the_transactions_only() -> None:
    conn = FakeConnection(autocommit=False)
    with acting_for("a"):
        apply_tenant(conn)  # type: ignore[arg-type]
        apply_tenant(conn)  # type: ignore[arg-type]
    assert conn.sent == [("a", True), ("a", True)]


def test_a_binding_stays_in_its_context() -> None:
    seen: list[str | None] = []
    before = current_tenant()

    def request() -> None:
        bind_tenant("a")
        seen.append(current_tenant())

    thread = threading.Thread(target=request)
    thread.start()
    thread.join()
    with acting_for("b"):
        seen.append(current_tenant())
    seen.append(current_tenant())
    assert seen == ["a", "b", before]


def test_a_batch_is_cut_into_one_run_per_tenant_in_order() -> None:
    assert runs_of([("a", 2), ("a", 1), ("b", 2), (None, 0), ("a", 3)]) == [
        ("a", 3), ("b", 2), ("a", 3)]
