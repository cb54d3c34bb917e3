"""The extraction worker: conversation turns from the ingest topic to cards.

Each message of the ingest topic carries ``Ingestion.Received`` or ``Ingestion.RerunRequested``
notifications (the ingest relay publishes only those). The turns of a polled batch are taken in
rounds, each round the next turn of every session in its share of the batch
(:mod:`services.ingest.rounds`): a session's turns go in order (the turn before may have opened
the slot this one changes), sessions side by side, and two rounds run side by side over the two
halves of the batch's sessions, one waiting for the read models or the store while the other
asks the model. A round

1. loads its turns while it waits (bounded) until the read models hold the slots this worker
   wrote, then reads each tenant's slots once and the sessions' earlier turns in one query
   (:mod:`services.ingest.catalogue`): each turn is shown the slots of the people it is about;
2. asks the model for each ``received`` turn's candidates, its share of ``concurrency`` calls at
   once (:class:`services.ingest.extraction.Extractor`, retries with backoff inside);
3. embeds in one batch what grounding and slot resolution compare, checks each candidate's value
   against the text shown and resolves its slot (:mod:`services.ingest.admission`);
4. saves its turns in one transaction a tenant
   (:meth:`~services.ingest.records.ExtractionRecords.apply_extractions`): for each turn what
   was admitted, where, and what was rejected with why (``Extracted``), the cards — each
   candidate an ordinary ``remember`` decision with a request id derived from the turn and its
   place — twin proposals and ``Applied``. A turn whose model failed on every retry is
   dead-lettered (``DeadLettered``) and stays listed until a re-run.

A turn found ``extracted`` (its answer kept alone, or by a release before) has its cards written
without asking the model again; ``applied`` or ``dead_letter``: nothing to do (a message
delivered again). The Kafka offset is committed only after every turn of the polled batch is
applied or dead-lettered: a worker killed mid-batch reads the batch again and, the turn's
version in the store deciding, every turn's cards exist exactly once. When a round's save fails
(the store is down, races lost again and again), each of its turns is saved alone, its model
answer first, waited out with backoff and the batch held: the model is not asked again. A
candidate the domain refuses (a value in the future, a bad slot) is left out with a log line,
the turn's other candidates applied.

A turn an erasure took (its key destroyed: its text reads as erased) is ``erased``: the model is
not asked, and an extraction in flight when the erasure lands writes nothing — its save is
refused whole by the key ring (``UnitErasedError``: no key of an erased unit is made again, and a
save sealed under a key destroyed since is refused in its own transaction), the round's other
turns are saved one at a time, and the ingestion says ``erased`` (its read model row, as the
erasure left it), never applied nor dead-lettered.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar
from uuid import UUID

from domain.erased import is_erased
from domain.errors import ConcurrentWriteError, StoreUnavailableError
from domain.ingestion import Ingestion
from infra.keyring import UnitErasedError
from infra.redact import described
from infra.relay_messages import RelayError, decode_messages
from services.ingest.admission import Admission
from services.ingest.applying import turn_of
from services.ingest.catalogue import Catalogue, NoCatalogue
from services.ingest.extraction import ExtractionFailed, Extractor, Shown
from services.ingest.records import TurnExtraction
from services.ingest.resolution import Thresholds
from services.ingest.rounds import RoundTurn, admit, extraction_of, show

log = logging.getLogger(__name__)

#: Errors worth waiting out: the turn is tried again, the batch held.
TRANSIENT = (StoreUnavailableError, ConcurrentWriteError)
#: Rounds a worker runs side by side, each over its share of the batch's sessions: while one
#: waits for the read models, the store or the model, the other works.
SIDE_BY_SIDE = 2
T = TypeVar("T")


class IngestWorker:
    """Turns ``app``'s ingested turns into cards through ``extractor``; :meth:`handle` does one
    turn, :meth:`handle_round` one turn of each of several sessions, :meth:`run` follows the
    ingest topic until ``stop``."""

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
        #: are waited for up to it before the tenant's catalogue is read.
        self._written: dict[str, int] = {}
        self._written_lock = threading.Lock()
        self.concurrency = max(1, concurrency)
        #: Rounds side by side, and the model calls each makes at once (``concurrency`` in all).
        self.lanes = min(SIDE_BY_SIDE, self.concurrency)
        self.calls = self.concurrency // self.lanes
        self.max_backoff = max_backoff
        self.applied = 0
        self.dead_lettered = 0
        self.erased = 0
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait

    def warm_up(self) -> None:
        """Load what the first turn would otherwise wait for (the offline embedding model)."""
        self.admission.warm_up()

    # -- turns --

    def handed_over(self, value: bytes) -> list[tuple[str, str, UUID]]:
        """(tenant, session, ingestion id) of each turn one Kafka message value hands over."""
        try:
            messages = decode_messages(value)
        except RelayError as error:
            log.error("ingest: a message that is no relayed event, left alone: %s", described(error))
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
        """Every turn, in rounds: the turns of one session in order, sessions side by side, the
        sessions shared out between :attr:`lanes` rounds run side by side."""
        sessions: dict[tuple[str, str], deque[UUID]] = {}
        for tenant, session, ingestion_id in turns:
            sessions.setdefault((tenant, session), deque()).append(ingestion_id)
        keys = list(sessions)
        lanes = [{key: sessions[key] for key in keys[lane::self.lanes]}
                 for lane in range(min(self.lanes, len(keys)))]
        self._each(self._rounds, lanes, at_once=len(lanes))

    def _rounds(self, sessions: dict[tuple[str, str], deque[UUID]]) -> None:
        while sessions:
            self.handle_round([(key[0], queue.popleft()) for key, queue in sessions.items()])
            sessions = {key: queue for key, queue in sessions.items() if queue}

    def handle(self, tenant_id: str, ingestion_id: UUID) -> str:
        """Take the turn as far as it goes; its status after."""
        return self.handle_round([(tenant_id, ingestion_id)])[0]

    def handle_round(self, turns: Sequence[tuple[str, UUID]]) -> list[str]:
        """Take each turn (of a session of its own) as far as it goes; their statuses after."""
        with ThreadPoolExecutor(1, thread_name_prefix="ingest-wait") as waiter:
            waited = waiter.submit(self._wait, dict.fromkeys(tenant for tenant, _ in turns))
            round_ = [self._until_done(ingestion_id, partial(self._load, tenant, ingestion_id))
                      for tenant, ingestion_id in turns]  # meanwhile
            waited.result()
        for item in round_:
            if item.ingestion.status == "received" and is_erased(item.ingestion.text):
                item.status = self._erased(item)  # taken by an erasure: nothing to ask
        asking = [item for item in round_ if not item.status and item.ingestion.status == "received"
                  and item.ingestion.role in self.shown.roles]
        self._show(asking)
        self._each(self._ask, asking)
        admit(self.admission, [item for item in asking if item.extraction is not None])
        self._save_together(round_)
        self._each(self._settle, [item for item in round_ if not item.status])
        return [item.status for item in round_]

    def _load(self, tenant_id: str, ingestion_id: UUID) -> RoundTurn:
        ingestion = self.app.load(tenant_id, ingestion_id, Ingestion, "ingested turn")
        return RoundTurn(tenant_id, ingestion_id, ingestion, turn_of(ingestion))

    def _wait(self, tenants: Iterable[str]) -> None:
        """Until the read models hold the slots this worker wrote for each tenant (bounded)."""
        for tenant_id in tenants:
            with self._written_lock:
                position = self._written.get(tenant_id, 0)
            self.catalogue.wait_for(tenant_id, position, self.shown.wait_seconds)

    def _show(self, items: list[RoundTurn]) -> None:
        """What each turn's extraction is shown, the tenant's slots read once for the round and
        the earlier turns of the round's sessions in one query."""
        for tenant_id in dict.fromkeys(item.tenant_id for item in items):
            slots = self.catalogue.slots(tenant_id)
            mine = [item for item in items if item.tenant_id == tenant_id]
            earlier = self.catalogue.previous_turns_of(
                tenant_id, [(item.turn.session_id, item.turn.said_at) for item in mine],
                self.shown.turns)
            for item, previous in zip(mine, earlier, strict=True):
                show(item, slots, previous, self.shown)

    def _ask(self, item: RoundTurn) -> None:
        try:
            item.extraction = self.extractor.extract(item.turn, item.context)
        except ExtractionFailed as failed:
            item.failed = failed

    def _save_together(self, round_: list[RoundTurn]) -> None:
        """The round's turns ready to apply, one save per tenant; when a save fails, its turns
        are left to :meth:`_settle`, one at a time."""
        tenants: dict[str, list[tuple[RoundTurn, TurnExtraction]]] = {}
        for item in round_:
            if not item.status and (extraction := extraction_of(item, self.shown.roles)) is not None:
                tenants.setdefault(item.tenant_id, []).append((item, extraction))

        def save(group: list[tuple[RoundTurn, TurnExtraction]]) -> None:
            tenant_id = group[0][0].tenant_id
            try:
                results = self.app.apply_extractions(tenant_id, [e for _, e in group])
            except TRANSIENT as error:
                log.warning("ingest: %d turn(s) wait for the store (%s); saved one at a time",
                            len(group), described(error))
                for item, _ in group:
                    item.retried = True
                return
            except UnitErasedError as erased:  # which turn: each is saved alone
                log.info("ingest: a save of %d turn(s) met an erasure (%s %s); saved one at a time",
                         len(group), erased.kind, erased.unit_id)
                for item, _ in group:
                    item.retried = True
                return
            for (item, extraction), result in zip(group, results, strict=True):
                item.status = result.outcome
                if item.status == "applied":
                    self._applied(tenant_id, extraction.candidates, result)

        self._each(save, list(tenants.values()))

    def _settle(self, item: RoundTurn) -> None:
        def step() -> str:
            try:
                return self._advance(item)
            except TRANSIENT:
                item.retried = True
                raise
            except UnitErasedError as erased:
                return self._erased_or_again(item, erased)

        item.status = self._until_done(item.ingestion_id, step)

    def _advance(self, item: RoundTurn) -> str:
        """One save for the turn where it stands (two after a failed save: the answer, then
        the cards); its status after."""
        if item.retried:
            item.ingestion = self._load(item.tenant_id, item.ingestion_id).ingestion
        ingestion, tenant_id = item.ingestion, item.tenant_id
        if ingestion.status == "received" and is_erased(ingestion.text):
            return self._erased(item)
        if ingestion.status == "received" and item.failed is not None:
            return self._dead_letter(item, item.failed)
        if (extraction := extraction_of(item, self.shown.roles)) is not None:
            if not item.extraction:  # nothing the model said is lost: one save
                result = self.app.apply_extractions(tenant_id, [extraction])[0]
                return self._applied(tenant_id, extraction.candidates, result)
            self.app.record_extraction(tenant_id, ingestion.id, extraction.candidates,
                                       extraction.model, extraction.attempts, extraction.rejected)
            ingestion = self._load(tenant_id, ingestion.id).ingestion
        if ingestion.status == "extracted":
            result = self.app.apply_extracted(tenant_id, ingestion.id)
            return self._applied(tenant_id, ingestion.candidates, result)
        return str(ingestion.status)

    def _applied(self, tenant_id: str, candidates: Sequence[dict[str, Any]], result: Any) -> str:
        if any(candidate.get("kind") == "state" for candidate in candidates):
            self._wrote(tenant_id, result)  # the next round's catalogue must show its slots
        self.applied += 1
        return "applied"

    def _dead_letter(self, item: RoundTurn, failed: ExtractionFailed) -> str:
        self.app.record_dead_letter(item.tenant_id, item.ingestion_id, str(failed), failed.attempts)
        self.dead_lettered += 1
        log.warning("ingest: turn %s/%s dead-lettered after %d attempt(s): %s",
                    item.turn.session_id, item.turn.turn_id, failed.attempts, described(failed))
        return "dead_letter"

    def _erased(self, item: RoundTurn) -> str:
        """The turn was erased before its extraction was saved: nothing is written for it."""
        self.erased += 1
        log.info("ingest: turn %s was erased: its extraction writes nothing", item.ingestion_id)
        return "erased"

    def _erased_or_again(self, item: RoundTurn, erased: UnitErasedError) -> str:
        """A save of the turn refused as written under an erased unit: if the unit is the turn
        (its text reads as erased once this process's decoded copies are dropped), ``erased``;
        else (a slot a candidate wrote to was erased meanwhile) the turn is decided again, on
        what the store holds now."""
        self.app._forget_erased()
        item.ingestion = self._load(item.tenant_id, item.ingestion_id).ingestion
        if is_erased(item.ingestion.text):
            return self._erased(item)
        item.retried = True
        raise ConcurrentWriteError(f"turn {item.ingestion_id}: a write under the erased "
                                   f"{erased.kind} {erased.unit_id}; decided again") from erased

    def _wrote(self, tenant_id: str, result: Any) -> None:
        position = getattr(result, "position", None) or 0
        with self._written_lock:
            self._written[tenant_id] = max(self._written.get(tenant_id, 0), position)

    def _until_done(self, ingestion_id: UUID, step: Callable[[], T]) -> T:
        """``step``, waiting out a failing store with backoff (until stopped)."""
        pause = 0.2
        while True:
            try:
                return step()
            except TRANSIENT as error:
                log.warning("ingest: turn %s waits for the store (%s); again in %.1f s",
                            ingestion_id, described(error), pause)
                if self._sleep(pause * random.uniform(0.5, 1.0)):
                    raise
                pause = min(pause * 2, self.max_backoff)

    def _each(self, step: Callable[[T], None], items: list[T], at_once: int | None = None) -> None:
        """``step`` for every item, ``at_once`` (by default a round's :attr:`calls`) at a time:
        a model call and a save mostly wait. A failure is raised once every item has run."""
        at_once = min(at_once or self.calls, len(items))
        if at_once <= 1:
            for item in items:
                step(item)
            return
        with ThreadPoolExecutor(at_once, thread_name_prefix="ingest") as pool:
            for done in [pool.submit(step, item) for item in items]:
                done.result()

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


__all__ = ["IngestWorker", "turn_of"]
