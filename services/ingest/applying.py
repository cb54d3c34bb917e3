"""Turns' recorded candidates as the aggregates of one save (DESIGN §4 and §9: ingest in few
transactions per turn).

:func:`decide_turns` takes the turns of one save one after another, and within each turn its
candidates in order, each through its ordinary decision — the one ``remember`` takes, so
cardinality, supersession, same-turn self-correction and the three arbitration layers apply as
to a direct write — all inside one :meth:`BaseApplication.holding`: a candidate sees what those
before it changed (the slot the first opened, the case it queued), in its turn or an earlier
one, as if each had been saved before it. Then, as the worker did command by command before: a
card that opened a slot close to another of its subject's is proposed as that slot's twin, and a
turn's concepts are ``related_to`` each other. Each turn's ``Applied`` follows its cards: the
caller saves all of it at once, so a turn's cards are stored with its ``Applied`` or not at all.

A candidate the domain refuses (a value in the future, a bad slot) is left out with a log line,
and the decision is made again without it from the stored state, so nothing it half-changed
remains. Each command keeps the request id derived from the turn and the candidate's place, so
its card and case ids are those a write of its own would have had; with ``receipts``, the
receipt of a candidate's command saved alone (by a worker of the release before, killed between
two candidates) answers for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain.errors import ConcurrentWriteError, PalimpsestError, StoreUnavailableError
from domain.ingestion import Ingestion
from domain.knowledge import KnowledgeCard
from domain.proposal import Proposal
from domain.receipt import Receipt
from domain.rules.validation import check_fields
from domain.values import Edge
from infra.redact import described
from services.command.commands import Remember, WriteResult
from services.ingest.admission import near_twin, twin_proposal
from services.ingest.extraction import TurnToExtract, plan_commands

if TYPE_CHECKING:
    from services.command.memory import Palimpsest

log = logging.getLogger(__name__)

#: What a turn's save records before its cards (its ``Extracted``), given the turn as stored;
#: None: the turn's extraction is recorded already. False: the turn is no longer where the
#: record expects it (another worker took it): it is left as it stands.
Record = Callable[[Ingestion, datetime], bool] | None
#: Failures of the store, not of a candidate: raised, never a reason to leave one out.
_TRANSIENT = (StoreUnavailableError, ConcurrentWriteError)


class _Refused(Exception):
    def __init__(self, ingestion_id: UUID, index: int, error: PalimpsestError) -> None:
        super().__init__(str(error))
        self.ingestion_id = ingestion_id
        self.index = index


def decide_turns(app: Palimpsest, tenant_id: str, turns: Sequence[tuple[UUID, Record]],
                 now: datetime, receipts: bool = False, loaded: dict[UUID, Ingestion] | None = None,
                 ) -> tuple[list[Aggregate], list[tuple[Ingestion, bool]]]:
    """What to save for ``turns`` (each an ingestion id and what to record of it first), in
    order, and each turn as decided with whether it was applied. ``loaded``: turns loaded
    already, taken (and removed) instead of loading them; the others are loaded."""
    left_out: set[tuple[UUID, int]] = set()
    loaded = loaded if loaded is not None else {}
    while True:
        try:
            return _decide_turns(app, tenant_id, turns, now, receipts, left_out, loaded)
        except _Refused as refused:
            log.warning("ingest: turn %s: candidate %d left out: %s", refused.ingestion_id,
                        refused.index, described(refused.__cause__ or refused))
            left_out.add((refused.ingestion_id, refused.index))


def _decide_turns(app: Palimpsest, tenant_id: str, turns: Sequence[tuple[UUID, Record]],
                  now: datetime, receipts: bool, left_out: set[tuple[UUID, int]],
                  loaded: dict[UUID, Ingestion],
                  ) -> tuple[list[Aggregate], list[tuple[Ingestion, bool]]]:
    made: dict[UUID, Aggregate] = {}
    decided: list[tuple[Ingestion, bool]] = []
    with app.holding() as held:
        def keep(*aggregates: Aggregate) -> None:
            for aggregate in aggregates:
                held[aggregate.id] = made[aggregate.id] = aggregate

        for ingestion_id, record in turns:
            ingestion = loaded.pop(ingestion_id, None) or app.load(
                tenant_id, ingestion_id, Ingestion, "ingested turn")
            if record is not None and not record(ingestion, now):
                decided.append((ingestion, False))
                continue
            ingestion.check_applicable()
            card_ids = _cards(app, tenant_id, ingestion, now, receipts, left_out, keep)
            ingestion.apply(tuple(card_ids), now)
            keep(ingestion)  # after the turn's cards: its Applied follows them in the log
            decided.append((ingestion, True))
    return list(made.values()), decided


def _cards(app: Palimpsest, tenant_id: str, ingestion: Ingestion, now: datetime, receipts: bool,
           left_out: set[tuple[UUID, int]], keep: Callable[..., None]) -> list[str]:
    """The turn's candidates decided one after another; the ids of the cards they wrote."""
    card_ids: list[str] = []
    knowledge: list[UUID] = []
    for index, command in enumerate(plan_commands(turn_of(ingestion), ingestion.candidates)):
        if (ingestion.id, index) in left_out:
            continue
        result = _receipt(app, tenant_id, command) if receipts else None
        if result is None:
            try:
                check_fields(dict(command))
                aggregates, result = app._decide_remember(tenant_id, command, now)
            except _TRANSIENT:
                raise
            except PalimpsestError as error:
                raise _Refused(ingestion.id, index, error) from error
            keep(*aggregates)
        if result.card_id is None:
            continue
        card_ids.append(str(result.card_id))
        if command.kind == "knowledge":
            knowledge.append(result.card_id)
        if (twin := near_twin(ingestion.candidates[index])) is not None:
            keep(*_twin(app, tenant_id, command, result.card_id, twin, now))
    keep(*_related(app, tenant_id, knowledge, now))
    return card_ids


def turn_of(ingestion: Ingestion) -> TurnToExtract:
    """The stored turn as its extraction and its commands read it."""
    return TurnToExtract(
        tenant_id=ingestion.tenant_id, ingestion_id=ingestion.id, session_id=ingestion.session_id,
        turn_id=ingestion.turn_id, role=ingestion.role, agent_id=ingestion.agent_id,
        text=ingestion.text, said_at=ingestion.said_at, timezone=ingestion.timezone,
        event_card_id=ingestion.event_card_id, speaker=ingestion.subject)


def _receipt(app: Palimpsest, tenant_id: str, command: Remember) -> WriteResult | None:
    """The answer a ``Remember`` saved alone under the command's request id gave, if one was."""
    assert command.request_id is not None
    receipt = app.find(tenant_id, Receipt.create_id(tenant_id, command.request_id), Receipt)
    if receipt is None or receipt.command != type(command).__name__:
        return None
    return WriteResult.model_validate({**receipt.answer, "replayed": True})


def _twin(app: Palimpsest, tenant_id: str, command: Remember, card_id: UUID,
          resolution: dict[str, Any], now: datetime) -> list[Proposal]:
    """The consolidation proposal for a card that opened a slot near a twin (none when the twin
    holds no current value, or the pair was proposed before)."""
    propose = twin_proposal(app, tenant_id, command, card_id, resolution)
    if propose is None:
        return []
    proposal_id = Proposal.create_id(tenant_id, propose.kind, propose.src_id, propose.dst_id)
    if app.find(tenant_id, proposal_id, Proposal) is not None:
        return []
    try:
        check_fields(dict(propose))
        app._check_pair(tenant_id, propose)
        return [Proposal.propose(
            tenant_id=tenant_id, kind=propose.kind, src_id=propose.src_id, dst_id=propose.dst_id,
            edge=propose.edge, rationale=propose.rationale, score=propose.score, timestamp=now)]
    except _TRANSIENT:
        raise
    except PalimpsestError as error:
        log.warning("ingest: no twin proposal for card %s: %s", card_id, described(error))
        return []


def _related(app: Palimpsest, tenant_id: str, knowledge: list[UUID],
             now: datetime) -> list[KnowledgeCard]:
    """Concepts discussed in one turn are ``related_to`` each other (a link made before stays)."""
    linked: dict[UUID, KnowledgeCard] = {}
    for i, first in enumerate(knowledge):
        for second in knowledge[i + 1:]:
            card = linked.get(first) or app.load(tenant_id, first, KnowledgeCard, "knowledge card")
            card.link(Edge.RELATED_TO, second, now)
            linked[first] = card
    return [card for card in linked.values() if card.pending_events]
