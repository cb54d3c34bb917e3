"""Group commit (``services.command.commit``): concurrent commands share one transaction of the store, each
gets its own recordings and position, and a race lost inside a batch reaches only its command."""

from __future__ import annotations

import threading
import time
from typing import Any

from domain.slot import Slot
from infra.settings import Settings
from services.command.application import utc_now
from services.command.memory import Palimpsest
from services.factory import create_app
from tests.support import all_events, new_tenant, state


class HeldApp(Palimpsest):
    """Its first transaction waits until ``queued`` commands are queued behind it: the batch that
    follows holds them all. Counts transactions and the events each held."""

    queued = 0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.transactions: list[int] = []
        self.first = threading.Event()

    def _record(self, processing_event: Any) -> Any:
        if not self.transactions and self.queued:
            self.first.set()
            deadline = time.monotonic() + 10  # a caller that never queues fails the test, not hangs it
            while len(self.group_commit._queue) < self.queued and time.monotonic() < deadline:  # type: ignore[union-attr]
                time.sleep(0.005)
        self.transactions.append(len(processing_event.events))
        return super()._record(processing_event)


def held_app(queued: int, **settings: Any) -> HeldApp:
    cls = type("Held", (HeldApp,), {"queued": queued})
    return create_app(Settings(persistence="memory", **settings), clock=utc_now,  # type: ignore[return-value]
                      app_class=cls)


def run_all(calls: list[Any]) -> tuple[list[Any], list[BaseException]]:
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as error:  # noqa: BLE001 - the test inspects what each caller got
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results, errors


def test_concurrent_commands_share_one_transaction_and_each_gets_its_position() -> None:
    app, tenant = held_app(queued=5), new_tenant()
    first = threading.Thread(target=app.remember, args=(tenant, state("label-0", "value 0")))
    first.start()
    assert app.first.wait(10)
    results, errors = run_all([lambda i=i: app.remember(tenant, state(f"label-{i}", f"value {i}"))
                               for i in range(1, 6)])
    first.join(timeout=30)
    assert errors == []
    assert len(app.transactions) == 2, app.transactions  # the held one, then the five together
    assert app.transactions[1] == sum(1 for _ in range(5)) * app.transactions[0]
    events = all_events(app)
    for result in results:  # each answer's position is the last of its own events
        own = [i + 1 for i, e in enumerate(events) if e.originator_id == result.aggregate_id]
        assert own and result.position == max(own)
    assert len({r.position for r in results}) == 5


def test_a_race_lost_inside_a_batch_reaches_only_its_command() -> None:
    """Without the aggregate locks, two writers of one slot land in one batch: the store refuses
    the batch, each decision is saved alone, the loser reloads and decides again; the other
    commands of the batch are stored once."""
    app, tenant = held_app(queued=0, conflict_retries=3), new_tenant()
    app.locks = None
    app.remember(tenant, state("address", "Taipei"))  # the slot exists: both writers change it
    app.transactions.clear()
    app.queued = 4
    results, errors = run_all(
        [lambda: app.remember(tenant, state("address", "Tainan")),
         lambda: app.remember(tenant, state("address", "Kaohsiung")),
         lambda: app.remember(tenant, state("diet", "vegan")),
         lambda: app.remember(tenant, state("employer", "Acme")),
         lambda: app.remember(tenant, state("city", "Hsinchu"))])
    assert errors == []
    held, batch, *alone = app.transactions
    assert held == 1 and batch > 3 and len(alone) >= 4, app.transactions  # refused, then one by one
    address = app.load(tenant, results[0].aggregate_id, Slot)
    assert results[1].aggregate_id == address.id
    cards = {e.originator_id: e for e in all_events(app)}
    assert address.version == cards[address.id].originator_version
    written = [e for e in all_events(app) if e.originator_id == address.id]
    contents = " ".join(repr(e.__dict__) for e in written)
    assert "Tainan" in contents and "Kaohsiung" in contents  # the loser decided again and landed
    for result, label in zip(results[2:], ("diet", "employer", "city"), strict=True):
        slot = app.load(tenant, result.aggregate_id, Slot)  # stored once each
        assert slot.label == label and len(slot.current_cards) == 1
        assert sum(1 for e in all_events(app) if e.originator_id == slot.id) == slot.version


def test_group_commit_off_saves_each_command_alone() -> None:
    app, tenant = held_app(queued=0, group_commit=False), new_tenant()
    assert app.group_commit is None
    results, errors = run_all([lambda i=i: app.remember(tenant, state(f"l{i}", "v")) for i in range(4)])
    assert errors == [] and len({r.position for r in results}) == 4
