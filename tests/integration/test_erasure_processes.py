"""An erasure made by one process reaches the aggregates another process decoded before it
(DESIGN §7, decision 0012), on the embedded PostgreSQL: two command applications on one store,
as two HTTP workers of ``serve`` are. The second has a card or a slot cached from before the
first erased it; what it decides next is decided again on what the store holds now, so no erased
text is copied into a new event under a live key, and a write to an erased slot opens the next
generation, as in the process that erased it; a card of an erased slot is revised in none."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import pytest

from domain.errors import CardNotFoundError
from services.command.commands import Erase, Merge, Remember, Revise, Verify
from services.command.memory import Palimpsest
from tests.support import all_events, new_tenant, state

pytestmark = pytest.mark.integration


def decoded(app: Palimpsest, tenant: str) -> str:
    """Every event of ``tenant`` as a process that never cached anything decodes it."""
    return "\n".join(repr(vars(event)) for event in all_events(app)
                     if getattr(event, "tenant_id", None) == tenant).lower()


def note(app: Palimpsest, tenant: str, title: str, tag: str) -> UUID:
    card_id = app.remember(tenant, Remember(kind="knowledge", memory_type="note", title=title,
                                            content=f"about {title}", tags=(tag,))).card_id
    assert card_id is not None
    return card_id


def test_a_card_erased_elsewhere_is_not_copied_by_a_merge_decided_on_its_cached_copy(
        processes: Callable[[], Palimpsest]) -> None:
    eraser, other = processes(), processes()
    tenant = new_tenant()
    gone = note(eraser, tenant, "harbour lessons", "erasedtag71")
    kept = note(eraser, tenant, "sailing club", "keptag71")
    other.verify(tenant, gone, Verify())  # the other process holds the card, decoded
    other.verify(tenant, kept, Verify())

    erased = eraser.erase(tenant, Erase(unit="card", card_id=gone))
    assert erased.keys_destroyed >= 1

    try:
        other.merge(tenant, Merge(card_id=gone, into=kept))
    except Exception as error:  # noqa: BLE001 - refusing the erased card is as good
        assert "erased" in str(error).lower() or "no card" in str(error).lower()
    text = decoded(processes(), tenant)
    assert "keptag71" in text
    assert "erasedtag71" not in text
    assert "harbour lessons" not in text


def test_a_write_to_a_slot_erased_elsewhere_opens_its_next_generation(
        processes: Callable[[], Palimpsest]) -> None:
    eraser, other = processes(), processes()
    tenant = new_tenant()
    first = eraser.remember(tenant, state("home port", "erasedport71 quay", subject="Wren"))
    other.remember(tenant, state("home port", "erasedport72 quay", subject="Wren"))  # cached

    def last_version() -> int:
        return max(e.originator_version for e in all_events(eraser)
                   if e.originator_id == first.aggregate_id)

    before = last_version()
    eraser.erase(tenant, Erase(unit="slot", subject="Wren", label="home port"))
    again = other.remember(tenant, state("home port", "newport73 quay", subject="Wren"))

    assert again.outcome == "remembered"  # nothing live to supersede: a slot of its own
    assert again.aggregate_id != first.aggregate_id
    text = decoded(processes(), tenant)
    assert "newport73" in text
    assert "erasedport71" not in text and "erasedport72" not in text
    assert last_version() == before  # the erased generation got nothing after its erasure


def test_the_count_of_destructions_moves_with_each_erasure_even_one_with_nothing_left(
        processes: Callable[[], Palimpsest]) -> None:
    eraser, other = processes(), processes()
    tenant = new_tenant()
    card = note(eraser, tenant, "kite repair", "kitetag71")

    def count() -> int | None:
        assert other.locks is not None
        held = other.locks.acquire([1])
        assert held is not None
        other.locks.release(held.token)
        return held.destroyed

    before = count()
    assert before is not None
    eraser.erase(tenant, Erase(unit="card", card_id=card, request_id="erase-kite-1"))
    after_first = count()
    eraser.erase(tenant, Erase(unit="card", card_id=card))  # nothing live is left
    assert after_first is not None and after_first > before
    assert (count() or 0) > after_first


def test_a_card_of_an_erased_slot_is_not_revised_in_any_process(
        processes: Callable[[], Palimpsest]) -> None:
    eraser, other = processes(), processes()
    tenant = new_tenant()
    first = eraser.remember(tenant, state("piano teacher", "erasedname74", subject="Wren"))
    assert first.aggregate_id is not None and first.card_id is not None
    other.verify(tenant, first.aggregate_id, Verify())  # cached here too

    eraser.erase(tenant, Erase(unit="slot", subject="Wren", label="piano teacher"))
    for app in (eraser, other):
        with pytest.raises(CardNotFoundError, match="erased"):
            app.revise(tenant, first.aggregate_id,
                       Revise(card_id=first.card_id, content="newname75"))
    assert "newname75" not in decoded(processes(), tenant)
