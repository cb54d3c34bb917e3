"""The command side: an eventsourcing Application whose methods load, make one domain call, save.

Every command runs through :meth:`Palimpsest._execute`, which gives it five properties: its text
is checked before anything is computed (DESIGN §4), idempotency by client request id (a receipt
saved with the command's events), turns on contended aggregates — it saves holding the locks of
the stored aggregates it changes, so writers hammering one slot take turns instead of losing
races (``services.command.locks``, decision 0006), and still reloads and decides again when it loses one —
a decision taken again when an erasure elsewhere destroyed keys since it began (this process's
cached aggregates were decoded with them; the locks read the count) or, landing after the locks,
made the key table refuse the save (``UnitErasedError``: nothing is written under an erased unit;
decided again once, on what the store holds now, it opens a slot anew or is refused as erased),
and store failures reported as retryable errors.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID, uuid4

from eventsourcing.application import AggregateNotFoundError, Application, LRUCache, ProcessingEvent
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import (
    EventStore,
    IntegrityError,
    JSONTranscoder,
    Mapper,
    PersistenceError,
    Recording,
)

from domain.base import TenantAggregate, derived_id
from domain.errors import (
    CardNotFoundError,
    ConcurrentWriteError,
    IdempotencyKeyReusedError,
    StoreUnavailableError,
)
from domain.policy import Policy
from domain.receipt import Receipt
from domain.rules.validation import check_fields
from domain.values import check_tenant
from infra.keyring import KeyRing, UnitErasedError
from infra.sealing import SealedEventStore, sealing_mapper
from infra.transcodings import register_domain_transcodings
from services.command.commands import Command, WriteResult
from services.command.commit import GroupCommit
from services.command.locks import LocalLocks, PostgresLocks, Turn

Clock = Callable[[], datetime]
A = TypeVar("A", bound=TenantAggregate)
#: A decision: given the time, the aggregates to save and the answer to give.
Decide = Callable[[datetime], tuple[Sequence[Aggregate], WriteResult]]
#: The aggregates a decision in progress has changed and not yet saved, by id; None outside
#: :meth:`BaseApplication.holding`.
_held: ContextVar[dict[UUID, Aggregate] | None] = ContextVar("palimpsest_held", default=None)


def utc_now() -> datetime:
    return datetime.now(UTC)


class BaseApplication(Application[UUID]):
    """Loading by tenant, saving with receipts and retries; the commands live in subclasses.

    ``conflict_lock``: a command saves holding the locks of the stored aggregates it changes
    (``services.command.locks``), so writers of one slot take turns; ``conflict_retries``: how often it
    reloads and decides again after losing a race all the same (a slot two writers open at once;
    a lock not had in time); ``conflict_backoff``: the longest pause before such a retry, in
    seconds (a random share of it, 5 ms doubling per retry up to it; 0 = none);
    ``lock_connections``: how many PostgreSQL lock sessions one process may hold at once;
    ``group_commit``: the decisions of concurrent commands are saved in one transaction
    (``services.command.commit``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every subclass shares one event store (``palimpsest_events``), whatever its class name.
        explicit = "name" in cls.__dict__
        super().__init_subclass__(**kwargs)
        if not explicit:
            cls.name = "Palimpsest"

    def __init__(
        self, env: dict[str, str], policy: Policy | None = None, clock: Clock = utc_now,
        conflict_retries: int = 3, conflict_lock: bool = True, conflict_backoff: float = 0.05,
        lock_connections: int = 8, group_commit: bool = True, keyring: KeyRing | None = None,
    ) -> None:
        self.keyring = keyring
        super().__init__(env=env)
        self.policy = policy or Policy()
        self.clock = clock
        self.conflict_retries = conflict_retries
        self.conflict_backoff = conflict_backoff
        self.locks = self._make_locks(lock_connections) if conflict_lock else None
        self.group_commit = GroupCommit(self._record) if group_commit else None
        #: The count of key destructions this process last dropped its decoded aggregates for.
        self._destroyed_seen = 0
        self._destroyed_lock = threading.Lock()

    def _make_locks(self, connections: int) -> LocalLocks:
        datastore: Any = getattr(self.recorder, "datastore", None)
        if datastore is None:  # the in-memory store lives in this process
            return LocalLocks()
        timeout = float(self.env.get("POSTGRES_LOCK_TIMEOUT") or 5)
        return PostgresLocks(dict(datastore.pool.kwargs), connections, timeout,
                             schema=self.env.get("POSTGRES_SCHEMA") or None)

    def close(self) -> None:
        if self.locks is not None:
            self.locks.close()
        super().close()

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_domain_transcodings(transcoder)

    def construct_mapper(self) -> Mapper[UUID]:
        """Personal fields sealed under their erasure unit's key (``infra.sealing``) when the
        application has a key ring; in the clear without one (a store that never forgets)."""
        return sealing_mapper(self.construct_transcoder(), self.keyring) or super().construct_mapper()

    def construct_event_store(self) -> EventStore[UUID]:
        return SealedEventStore(mapper=self.mapper, recorder=self.recorder)

    def forget_decoded(self) -> None:
        """Drop every aggregate the repository cached: they were decoded while keys an erasure
        destroyed were live."""
        cache: Any = self.repository.cache
        if cache is None:
            return
        lock = getattr(cache, "lock", None) or contextlib.nullcontext()
        with lock:
            cache.cache.clear()
            if isinstance(cache, LRUCache):
                cache.clear()
                cache.full = False

    def _erased_since(self, seen: int, destroyed: int | None) -> bool:
        """Whether erasure keys were destroyed (by any process: ``destroyed`` is the count the
        command's locks read) since a decision that began when this process had seen ``seen``;
        if so, what this process decoded and the keys it cached are dropped."""
        if destroyed is None or destroyed <= seen:
            return False
        self.forget_decoded()
        if self.keyring is not None:
            self.keyring.forget_every_cached()
        with self._destroyed_lock:
            self._destroyed_seen = max(self._destroyed_seen, destroyed)
        return True

    def _forget_erased(self) -> None:
        """Drop what this process decoded and the keys it cached: an erasure destroyed some."""
        self.forget_decoded()
        if self.keyring is not None:
            self.keyring.forget_every_cached()

    def load(self, tenant_id: str, aggregate_id: UUID, cls: type[A], what: str = "card") -> A:
        """The aggregate, if it exists, is a ``cls`` and belongs to ``tenant_id``.

        Another tenant's id is answered exactly like a missing one."""
        aggregate: Any
        held = _held.get()
        try:
            aggregate = held[aggregate_id] if held and aggregate_id in held \
                else self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            aggregate = None
        except PersistenceError as error:
            raise StoreUnavailableError(f"the event store failed: {error}") from error
        if not isinstance(aggregate, cls) or aggregate.tenant_id != tenant_id:
            raise CardNotFoundError(f"no {what} {aggregate_id}") from None
        return aggregate

    @contextlib.contextmanager
    def holding(self) -> Iterator[dict[UUID, Aggregate]]:
        """Inside, :meth:`load` and :meth:`find` return the aggregate put in the yielded mapping
        under its id instead of the stored one: the steps of one decision that change the same
        aggregates in turn (a turn's candidates writing one slot) see each other's changes before
        the one save."""
        held: dict[UUID, Aggregate] = {}
        token = _held.set(held)
        try:
            yield held
        finally:
            _held.reset(token)

    def find(self, tenant_id: str, aggregate_id: UUID, cls: type[A]) -> A | None:
        try:
            return self.load(tenant_id, aggregate_id, cls)
        except CardNotFoundError:
            return None

    def new_id(self, tenant_id: str, command: Command, role: str) -> UUID:
        """Ids of what a command creates: derived from its request id when it has one."""
        if command.request_id:
            return derived_id(role, tenant_id, command.request_id)
        return uuid4()

    def _execute(self, tenant_id: str, command: Command, decide: Decide) -> WriteResult:
        check_tenant(tenant_id)
        check_fields(dict(command))  # before anything is computed: the fingerprint serialises it
        name = type(command).__name__
        fingerprint = _fingerprint(command)
        lost = 0
        refused = False
        with Turn(self.locks) as turn:
            while True:
                earlier = self._receipt(tenant_id, command, name, fingerprint)
                if earlier is not None:
                    return earlier
                now = self.clock()
                seen = self._destroyed_seen
                aggregates, answer = decide(now)
                aggregates = list(aggregates)
                if turn.take(_existing(aggregates)):
                    continue  # another writer held an aggregate meanwhile: decide again, in turn
                if self._erased_since(seen, turn.destroyed):
                    continue  # decided on what an erasure elsewhere forgot: decode it again
                if command.request_id:
                    aggregates.append(Receipt(
                        tenant_id=tenant_id, request_id=command.request_id, command=name,
                        fingerprint=fingerprint, answer=answer.model_dump(mode="json"),
                        timestamp=now,
                    ))
                try:
                    recordings = self._save(aggregates)
                except UnitErasedError:  # an erasure landed after the locks were read
                    if refused:
                        raise
                    refused = True
                    self._forget_erased()
                    continue  # decide again on what the store holds now
                except IntegrityError:  # another writer moved an aggregate first
                    lost += 1
                    if lost > self.conflict_retries:
                        raise ConcurrentWriteError(f"{name} lost the race {lost} times; retry it"
                                                   ) from None
                    self._back_off(lost)
                    turn.take(a.id for a in aggregates)  # then reload and decide again, in turn
                    continue
                except PersistenceError as error:
                    raise StoreUnavailableError(f"the event store failed: {error}") from error
                position = max((r.notification.id for r in recordings), default=None)
                return answer.model_copy(update={"position": position})

    def _save(self, aggregates: Sequence[Aggregate]) -> list[Recording[UUID]]:
        """``save``, in one transaction with the decisions of concurrent commands when grouped."""
        if self.group_commit is None:
            return self.save(*aggregates)
        decision: ProcessingEvent[UUID] = ProcessingEvent()
        decision.collect_events(*aggregates)
        recordings = self.group_commit.save(decision)
        self._take_snapshots(decision)
        self._notify(recordings)
        return recordings

    def _back_off(self, lost: int) -> None:
        """A random pause, up to ``conflict_backoff`` and growing with each retry: writers that
        keep colliding spread out instead of colliding again."""
        if self.conflict_backoff > 0:
            ceiling = min(self.conflict_backoff, 0.005 * 2 ** (lost - 1))
            time.sleep(random.uniform(0, ceiling))  # jitter, not a secret

    def _refuse_erased_answer(self, tenant_id: str, answer: dict[str, Any]) -> None:
        """A request whose card was erased since is answered as erased, whatever its body: were
        the body compared first, a retry with a guessed text would confirm the erased text (the
        same body replays, another is refused as a reused key)."""
        erased = _erased_card(getattr(self, "keyring", None), tenant_id, answer)
        if erased is not None:
            raise UnitErasedError(tenant_id, "card", erased)

    def _receipt(
        self, tenant_id: str, command: Command, name: str, fingerprint: str
    ) -> WriteResult | None:
        if not command.request_id:
            return None
        receipt = self.find(tenant_id, Receipt.create_id(tenant_id, command.request_id), Receipt)
        if receipt is None:
            return None
        self._refuse_erased_answer(tenant_id, receipt.answer)  # before the fingerprint is compared
        if receipt.fingerprint != fingerprint or receipt.command != name:
            raise IdempotencyKeyReusedError(
                f"request id {command.request_id!r} was already used for a different command"
            )
        return WriteResult.model_validate({**receipt.answer, "replayed": True})


def _erased_card(keyring: Any, tenant_id: str, answer: dict[str, Any]) -> UUID | None:
    """The card ``answer`` names, if an erasure destroyed its keys."""
    card = answer.get("card_id")
    if keyring is None or card is None:
        return None
    card_id = UUID(str(card))
    return None if keyring.find(tenant_id, cards=[card_id]) else card_id


def _existing(aggregates: Sequence[Aggregate]) -> list[UUID]:
    """The aggregates a decision changes that were stored before it: the ones a race is on (a new
    card's id is new; two writers opening one slot at once meet on their first save)."""
    return [a.id for a in aggregates
            if a.pending_events and a.pending_events[0].originator_version > 1]


def _fingerprint(command: Command) -> str:
    body: Any = command.model_dump_json(exclude={"request_id"})
    return hashlib.sha256(body.encode()).hexdigest()
