"""Every read model forgets, in the pure fold (``projections.fold``) on the in-memory store: the
rows projected before an erasure, then tombstoned by it, equal the rows a replay after it makes
from events whose texts read as erased — whole, by shares of the aggregates, and as known at a
moment before the erasure — and none of them holds an erased text; after an erasure the
projector's key ring forgets its keys, and a vacuum that fails is only logged."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from domain.erased import ERASED
from infra.settings import Settings
from projections.cards import operations
from projections.erasures import follow_erasures, vacuum_statement
from projections.fold import Folded, fold
from projections.ops import PutCard
from projections.projector import Delivered, decode
from services.command.commands import Erase
from services.command.memory import Palimpsest
from services.factory import create_app
from tests.erasure_story import Person, arbitrate, forget, person, tell
from tests.support import Clock, new_tenant, state


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(clock: Clock) -> Palimpsest:
    return create_app(Settings(persistence="memory"), clock=clock)


def decoded(app: Palimpsest, after: int = 0) -> list[Delivered]:
    """The log after notification ``after``, decoded now (with the keys live now)."""
    head = app.recorder.max_notification_id() or 0
    return [decode(app.mapper, n) for n in app.recorder.select_notifications(
        start=after + 1, limit=head + 1, stop=head)]


def tables(folded: Folded) -> dict[str, list[Any]]:
    rows = {table: sorted(rows, key=repr) for table, (_, rows) in folded.sink.rows().items()}
    rows["tracking"] = sorted(folded.tracking.items(), key=repr)
    return rows


def texts(folded: Folded) -> str:
    return repr(folded.sink.rows()).lower()


def story(app: Palimpsest, clock: Clock) -> tuple[str, Person, Person]:
    tenant = new_tenant()
    mira, noah = tell(app, tenant, clock, person("mira")), tell(app, tenant, clock, person("noah"))
    arbitrate(app, tenant, mira)
    return tenant, mira, noah


def test_projected_then_forgotten_equals_replayed_after_the_erasure(app, clock) -> None:
    tenant, mira, noah = story(app, clock)
    before = decoded(app)  # what the projector read while the keys were live
    clock.advance(days=1)
    forget(app, tenant, mira)
    erasures = decoded(app, after=before[-1].notification_id)
    head = erasures[-1].notification_id
    incremental, replayed = fold([*before, *erasures], head, None), fold(decoded(app), head, None)
    assert tables(incremental) == tables(replayed)
    text = texts(replayed)
    assert not [c for c in mira.canaries if c in text], "no erased text is left"
    assert all(c in text for c in noah.projected), "the other person's stays"
    cards = replayed.sink.cards
    tombstones = [row for (owner, _), row in cards.items() if row["erased_at"] is not None]
    assert {row["card_id"] for row in tombstones} >= {mira.cards[k] for k in ("city1", "event")}
    assert all(row["content"] is None and not row["terms"] and row["fuzzy_text"] == ""
               for row in tombstones)
    (erasure, _) = sorted(replayed.sink.erasures.values(), key=lambda r: r["position"])
    assert (erasure["unit"], erasure["basis"], erasure["requested_by"]) == ("subject", "gdpr-17", "dpo")
    assert erasure["cards"] > 0 and erasure["keys_destroyed"] >= erasure["cards"]
    assert "asked by email" not in text, "the reason stays sealed in the log"


def test_a_fold_by_shares_forgets_what_erasures_of_other_shares_name(app, clock) -> None:
    tenant, mira, _ = story(app, clock)
    clock.advance(days=1)
    forget(app, tenant, mira)
    log = decoded(app)
    head = log[-1].notification_id
    whole = fold(log, head, None)
    shares = [fold(log, head, None, share=(part, 3)) for part in range(3)]
    for table, rows in tables(whole).items():
        split = sorted((row for share in shares for row in tables(share)[table]), key=repr)
        assert split == rows, f"{table}: the shares together are the whole"
    assert sum(share.count for share in shares) == whole.count, "an erasure is counted once"


def test_as_known_before_an_erasure_the_tombstones_show_with_its_time(app, clock) -> None:
    tenant, mira, noah = story(app, clock)
    before = decoded(app)
    moment = clock.now
    clock.advance(days=1)
    erased_at = clock.now
    forget(app, tenant, mira)
    erasures = decoded(app, after=before[-1].notification_id)
    head = erasures[-1].notification_id
    past = fold(decoded(app), head, moment)
    assert tables(past) == tables(fold([*before, *erasures], head, moment))
    text = texts(past)
    assert not [c for c in mira.canaries if c in text]
    assert noah.canary("city3") in text
    assert not past.sink.erasures, "the erasure itself was not known then"
    assert {row["erased_at"] for row in past.sink.cards.values()} == {None, erased_at}
    assert all(v["erased_at"] == erased_at for history in past.sink.versions.values()
               for v in history if v["content"] is None)


def test_a_card_erased_then_superseded_and_verified_stays_a_tombstone_in_both(app, clock) -> None:
    tenant = new_tenant()
    old = app.remember(tenant, state("diet", "zqdiet01vegetarian"))
    before = decoded(app)
    clock.advance(days=1)
    app.erase(tenant, Erase(unit="card", card_id=old.card_id))
    clock.advance(days=1)
    new = app.remember(tenant, state("diet", "zqdiet02vegan", valid_from=clock.now - timedelta(days=5)))
    app.remember(tenant, state("diet", "zqdiet02vegan"))
    after = decoded(app, after=before[-1].notification_id)
    head = after[-1].notification_id
    incremental, replayed = fold([*before, *after], head, None), fold(decoded(app), head, None)
    assert tables(incremental) == tables(replayed)
    row = replayed.sink.cards[(tenant, old.card_id)]
    assert row["content"] is None and row["erased_at"] is not None and row["label"] == "diet"
    assert replayed.sink.cards[(tenant, new.card_id)]["content"] == "zqdiet02vegan"
    assert "zqdiet01" not in texts(replayed)


def test_an_erased_text_is_written_as_null_and_marks_the_card(app, clock) -> None:
    tenant = new_tenant()
    app.remember(tenant, state("city", "Oslo"))
    (opened, remembered, *_) = [d.event for d in decoded(app)]
    erased = replace(remembered.card, value=ERASED, item_key=ERASED)
    object.__setattr__(remembered, "card", erased)  # as a replay reads it once the key is gone
    put = next(op for op in operations(remembered) if isinstance(op, PutCard))
    assert put.row["content"] is None and put.row["item_key"] is None
    assert put.row["erased_at"] == remembered.timestamp and put.row["terms"] == []
    assert opened.subject == "user"



def test_after_an_erasure_the_ring_forgets_its_keys_and_a_failed_vacuum_is_only_logged(
        caplog) -> None:
    forgotten: list[Any] = []

    class Ring:
        def forget_cached(self, key_ids: Any) -> None:
            forgotten.extend(key_ids)

    def unreachable(**kwargs: Any) -> Any:
        raise psycopg.OperationalError("the database went away")

    keys = (uuid4(), uuid4())
    follow = follow_erasures(unreachable, "palimpsest_read", "palimpsest", Ring())
    follow([SimpleNamespace(key_ids=keys[:1]), SimpleNamespace(key_ids=keys[1:])])
    assert forgotten == list(keys)
    assert "the vacuum of the touched tables failed" in caplog.text
    statement = vacuum_statement("palimpsest_read", "palimpsest").as_string(None)
    assert '"palimpsest_read"."cards"' in statement and '"palimpsest"."embedding_cache"' in statement
