"""The extraction worker: conversation turns from the ingest topic to cards.

Each message of the ingest topic carries ``Ingestion.Received`` or ``Ingestion.RerunRequested``
notifications (the ingest relay publishes only those). For each, the worker loads the turn's
``Ingestion`` and goes on from where it stands:

* ``received`` — the model is asked (:class:`services.ingest.extraction.Extractor`, retries with
  backoff inside), shown the slots the memory holds of the people the turn is about and the
  session's earlier turns (:mod:`services.ingest.catalogue`); each candidate's value is checked
  against that text and its slot resolved against the tenant's (:mod:`services.ingest.admission`);
  what is admitted, where, and what is rejected, with why, is recorded (``Extracted``) before any
  card is written, so a worker that dies after this point applies the same candidates when it comes back,
  without asking the model again; when every retry failed, the turn is dead-lettered
  (``DeadLettered``) — it stays listed until a re-run;
* ``extracted`` — each candidate becomes an ordinary command (:func:`plan_commands`) with a
  request id derived from the turn and the candidate's place, so a command applied before a crash
  is answered from its receipt, not stored twice; a card whose new slot sits close to an existing
  one is proposed as its twin (a consolidation proposal, never merged silently); then
  ``Applied`` with the cards' ids;
* ``applied`` or ``dead_letter`` — nothing to do (a message delivered again).

The turns of one session are taken in order, sessions side by side (``concurrency`` threads: a
model call mostly waits on the network). The Kafka offset is committed only after every turn of
the polled batch is applied or dead-lettered: a worker killed mid-batch reads the batch again
and, by the rules above, every turn's cards exist exactly once. A store that fails (a lost
connection) is waited out with backoff, the batch held; a candidate the domain refuses (a value
in the future, a bad slot) is left out with a log line, the turn's other candidates applied.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any
from uuid import UUID

from domain.errors import ConcurrentWriteError, PalimpsestError, StoreUnavailableError
from domain.ingestion import Ingestion
from infra.relay_messages import RelayError, decode_messages
from services.command.commands import Link, Remember
from services.ingest.admission import Admission, near_twin, twin_proposal
from services.ingest.candidates import Candidate
from services.ingest.catalogue import Catalogue, CatalogueSlot, NoCatalogue
from services.ingest.extraction import (
    ExtractionFailed,
    Extractor,
    Shown,
    TurnContext,
    TurnToExtract,
    as_speaker,
    plan_commands,
    speaker_view,
)
from services.ingest.resolution import USER, Thresholds

log = logging.getLogger(__name__)

#: Errors worth waiting out: the turn is tried again, the batch held.
TRANSIENT = (StoreUnavailableError, ConcurrentWriteError)


class IngestWorker:
    """Turns ``app``'s ingested turns into cards through ``extractor``; :meth:`handle` does one
    turn, :meth:`run` follows the ingest topic until ``stop``."""

    def __init__(self, app: Any, extractor: Extractor, *, concurrency: int = 8,
                 max_backoff: float = 10.0, sleep: Callable[[float], bool] | None = None,
                 catalogue: Catalogue | None = None, admission: Admission | None = None,
                 shown: Shown | None = None) -> None:
        self.app = app
        self.extractor = extractor
        self.catalogue = catalogue or NoCatalogue()
        self.admission = admission or Admission(None, Thresholds(reuse=1.0, near=1.0), 1.0)
        self.shown = shown or Shown()
        #: Per tenant, the position of the last turn this worker wrote slots for: the read models
        #: are waited for up to it before a turn's catalogue is read.
        self._written: dict[str, int] = {}
        self._written_lock = threading.Lock()
        self.concurrency = max(1, concurrency)
        self.max_backoff = max_backoff
        self.applied = 0
        self.dead_lettered = 0
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait

    # -- one turn --

    def handed_over(self, value: bytes) -> list[tuple[str, str, UUID]]:
        """(tenant, session, ingestion id) of each turn one Kafka message value hands over."""
        try:
            messages = decode_messages(value)
        except RelayError as error:
            log.error("ingest: a message that is no relayed event, left alone: %s", error)
            return []
        turns = []
        for message in messages:
            event = self.app.mapper.to_domain_event(message.to_stored_event())
            if isinstance(event, Ingestion.Received):
                turns.append((event.tenant_id, event.session_id, event.originator_id))
            elif isinstance(event, Ingestion.RerunRequested):
                session = self.app.load(event.tenant_id, event.originator_id, Ingestion).session_id
                turns.append((event.tenant_id, session, event.originator_id))
        return turns

    def handle_all(self, turns: list[tuple[str, str, UUID]]) -> None:
        """Every turn: the turns of one session in order, sessions side by side on the pool (a
        model call waits on the network; one session's turns may change one slot in turn)."""
        sessions: dict[tuple[str, str], list[UUID]] = {}
        for tenant, session, ingestion_id in turns:
            sessions.setdefault((tenant, session), []).append(ingestion_id)

        def one_session(key: tuple[str, str]) -> None:
            for ingestion_id in sessions[key]:
                self.handle_until_done(key[0], ingestion_id)

        if len(sessions) == 1 or self.concurrency == 1:
            for key in sessions:
                one_session(key)
            return
        with ThreadPoolExecutor(min(self.concurrency, len(sessions)),
                                thread_name_prefix="ingest") as pool:
            for done in [pool.submit(one_session, key) for key in sessions]:
                done.result()  # a failure is raised here, after every session has run

    def handle_until_done(self, tenant_id: str, ingestion_id: UUID) -> None:
        """:meth:`handle`, waiting out a failing store with backoff (until stopped)."""
        pause = 0.2
        while True:
            try:
                self.handle(tenant_id, ingestion_id)
                return
            except TRANSIENT as error:
                log.warning("ingest: turn %s waits for the store (%s); again in %.1f s",
                            ingestion_id, error, pause)
                if self._sleep(pause * random.uniform(0.5, 1.0)):
                    raise
                pause = min(pause * 2, self.max_backoff)

    def handle(self, tenant_id: str, ingestion_id: UUID) -> str:
        """Take the turn as far as it goes; its status after."""
        ingestion = self.app.load(tenant_id, ingestion_id, Ingestion, "ingested turn")
        if ingestion.status == "received" and ingestion.role not in self.shown.roles:
            self.app.record_extraction(tenant_id, ingestion_id, [], f"none: {ingestion.role} turns "
                                       "are context, not extracted", 0)
            ingestion = self.app.load(tenant_id, ingestion_id, Ingestion, "ingested turn")
        if ingestion.status == "received":
            turn = turn_of(ingestion)
            slots, context = self.context(turn)
            try:
                extraction = self.extractor.extract(turn, context)
            except ExtractionFailed as failed:
                self.app.record_dead_letter(tenant_id, ingestion_id, str(failed), failed.attempts)
                self.dead_lettered += 1
                log.warning("ingest: turn %s/%s dead-lettered after %d attempt(s): %s",
                            ingestion.session_id, ingestion.turn_id, failed.attempts, failed)
                return "dead_letter"
            admitted = self.admission.admit(extraction.candidates, context.texts(turn), slots)
            admitted.candidates = [_spoken_by(c, turn.speaker) for c in admitted.candidates]
            if admitted.rejected:  # the values stay out of the log: it is not erasable text
                log.info("ingest: turn %s/%s: %d candidate(s) not grounded in the text shown, "
                         "not written", turn.session_id, turn.turn_id, len(admitted.rejected))
            self.app.record_extraction(
                tenant_id, ingestion_id, [c.stored() for c in admitted.candidates],
                extraction.model, extraction.attempts, admitted.rejected)
            ingestion = self.app.load(tenant_id, ingestion_id, Ingestion, "ingested turn")
        if ingestion.status == "extracted":
            card_ids = self.apply(tenant_id, ingestion)
            applied = self.app.record_applied(tenant_id, ingestion_id, card_ids)
            if any(candidate.get("kind") == "state" for candidate in ingestion.candidates):
                self._wrote(tenant_id, applied)  # the next turn's catalogue must show its slots
            self.applied += 1
            return "applied"
        return str(ingestion.status)

    def context(self, turn: TurnToExtract) -> tuple[list[CatalogueSlot], TurnContext]:
        """The tenant's slots (once the read models hold what this worker wrote for it), and
        what the turn's extraction is shown: the slots of the people it is about and the
        session's earlier turns, bounded by ``shown``."""
        with self._written_lock:
            position = self._written.get(turn.tenant_id, 0)
        self.catalogue.wait_for(turn.tenant_id, position, self.shown.wait_seconds)
        slots = speaker_view(self.catalogue.slots(turn.tenant_id), turn.speaker)
        previous = self.catalogue.previous_turns(turn.tenant_id, turn.session_id, turn.said_at,
                                                 self.shown.turns)
        texts = [turn.text, *(prior.text for prior in previous)]
        return slots, TurnContext(slots=tuple(self.shown.about(slots, texts)),
                                  previous=tuple(previous), value_chars=self.shown.value_chars,
                                  turn_chars=self.shown.turn_chars)

    def _wrote(self, tenant_id: str, result: Any) -> None:
        position = getattr(result, "position", None) or 0
        with self._written_lock:
            self._written[tenant_id] = max(self._written.get(tenant_id, 0), position)

    def apply(self, tenant_id: str, ingestion: Ingestion) -> list[str]:
        """The recorded candidates as commands, in order; the ids of the cards they wrote."""
        card_ids: list[str] = []
        knowledge: list[UUID] = []
        for index, command in enumerate(plan_commands(turn_of(ingestion), ingestion.candidates)):
            try:
                result = self.app.remember(tenant_id, command)
            except TRANSIENT:
                raise
            except PalimpsestError as error:
                log.warning("ingest: turn %s/%s: candidate %d left out: %s",
                            ingestion.session_id, ingestion.turn_id, index, error)
                continue
            if result.card_id is not None:
                card_ids.append(str(result.card_id))
                if command.kind == "knowledge":
                    knowledge.append(result.card_id)
                if (twin := near_twin(ingestion.candidates[index])) is not None:
                    self._propose_twin(tenant_id, command, result.card_id, twin)
        self._relate(tenant_id, ingestion, knowledge)
        return card_ids

    def _propose_twin(self, tenant_id: str, command: Remember, card_id: UUID,
                      resolution: dict[str, Any]) -> None:
        """A card that opened a slot close to another of its subject's: proposed to take the
        place of the twin's current value, for a person to accept or reject."""
        proposal = twin_proposal(self.app, tenant_id, command, card_id, resolution)
        if proposal is not None:
            self.app.propose(tenant_id, proposal)
    def _relate(self, tenant_id: str, ingestion: Ingestion, knowledge: list[UUID]) -> None:
        """Concepts discussed in one turn are ``related_to`` each other."""
        for first, second in _pairs(knowledge):
            self.app.link(tenant_id, Link(
                card_id=first, edge="related_to", target_id=second,
                request_id=f"ingest:{ingestion.id}:related:{first}:{second}"))

    def close(self) -> None:
        self.catalogue.close()

    # -- the topic --

    def run(self, consumer: Any, stop: threading.Event, batch: int = 50) -> None:
        """Poll ``consumer`` (a kafka-python consumer of the ingest topic, auto-commit off) until
        ``stop``; commit after each batch is handled."""
        self._stop = stop
        self._sleep = stop.wait
        while not stop.is_set():
            polled = consumer.poll(timeout_ms=500, max_records=batch)
            if not polled:
                continue
            turns = [turn for records in polled.values() for record in records
                     for turn in self.handed_over(record.value)]
            try:
                self.handle_all(turns)
            except TRANSIENT:
                return  # stopped while waiting for the store: the batch is read again next time
            consumer.commit()


def turn_of(ingestion: Ingestion) -> TurnToExtract:
    return TurnToExtract(
        tenant_id=ingestion.tenant_id, ingestion_id=ingestion.id, session_id=ingestion.session_id,
        turn_id=ingestion.turn_id, role=ingestion.role, agent_id=ingestion.agent_id,
        text=ingestion.text, said_at=ingestion.said_at, timezone=ingestion.timezone,
        event_card_id=ingestion.event_card_id, speaker=ingestion.speaker or USER)


def _spoken_by(candidate: Candidate, speaker: str) -> Candidate:
    """A candidate in the tenant's terms: what the extraction calls ``user`` is the speaker."""
    resolution = candidate.resolution
    if resolution is not None and "subject" in resolution:
        resolution = {**resolution, "subject": as_speaker(resolution["subject"], speaker)}
    return replace(candidate, subject=as_speaker(candidate.subject, speaker), resolution=resolution)


def _pairs(items: list[UUID]) -> Iterable[tuple[UUID, UUID]]:
    for i, first in enumerate(items):
        for second in items[i + 1:]:
            yield first, second


__all__ = ["IngestWorker", "turn_of"]
