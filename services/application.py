"""The command side: an eventsourcing Application whose methods load, make one domain call, save.

Every command runs through :meth:`Palimpsest._execute`, which gives it three properties:
idempotency by client request id (a receipt saved with the command's events), reload-and-decide
again when another writer won the race on the same aggregate, and store failures reported as
retryable errors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID, uuid4

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError, JSONTranscoder, PersistenceError

from domain.base import TenantAggregate, derived_id
from domain.errors import (
    CardNotFoundError,
    ConcurrentWriteError,
    IdempotencyKeyReusedError,
    StoreUnavailableError,
)
from domain.policy import Policy
from domain.receipt import Receipt
from infra.transcodings import register_domain_transcodings
from services.commands import Command, WriteResult

Clock = Callable[[], datetime]
A = TypeVar("A", bound=TenantAggregate)
#: A decision: given the time, the aggregates to save and the answer to give.
Decide = Callable[[datetime], tuple[Sequence[Aggregate], WriteResult]]


def utc_now() -> datetime:
    return datetime.now(UTC)


class BaseApplication(Application[UUID]):
    """Loading by tenant, saving with receipts and retries; the commands live in subclasses."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every subclass shares one event store (``palimpsest_events``), whatever its class name.
        explicit = "name" in cls.__dict__
        super().__init_subclass__(**kwargs)
        if not explicit:
            cls.name = "Palimpsest"

    def __init__(
        self, env: dict[str, str], policy: Policy | None = None, clock: Clock = utc_now,
        conflict_retries: int = 3,
    ) -> None:
        super().__init__(env=env)
        self.policy = policy or Policy()
        self.clock = clock
        self.conflict_retries = conflict_retries

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_domain_transcodings(transcoder)

    def load(self, tenant_id: str, aggregate_id: UUID, cls: type[A], what: str = "card") -> A:
        """The aggregate, if it exists, is a ``cls`` and belongs to ``tenant_id``.

        Another tenant's id is answered exactly like a missing one."""
        aggregate: Any
        try:
            aggregate = self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            aggregate = None
        except PersistenceError as error:
            raise StoreUnavailableError(f"the event store failed: {error}") from error
        if not isinstance(aggregate, cls) or aggregate.tenant_id != tenant_id:
            raise CardNotFoundError(f"no {what} {aggregate_id}") from None
        return aggregate

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
        name = type(command).__name__
        fingerprint = _fingerprint(command)
        for _ in range(self.conflict_retries + 1):
            earlier = self._receipt(tenant_id, command, name, fingerprint)
            if earlier is not None:
                return earlier
            now = self.clock()
            aggregates, answer = decide(now)
            aggregates = list(aggregates)
            if command.request_id:
                aggregates.append(Receipt(
                    tenant_id=tenant_id, request_id=command.request_id, command=name,
                    fingerprint=fingerprint, answer=answer.model_dump(mode="json"), timestamp=now,
                ))
            try:
                recordings = self.save(*aggregates)
            except IntegrityError:
                continue  # another writer moved an aggregate first: reload and decide again
            except PersistenceError as error:
                raise StoreUnavailableError(f"the event store failed: {error}") from error
            position = max((r.notification.id for r in recordings), default=None)
            return answer.model_copy(update={"position": position})
        raise ConcurrentWriteError(
            f"{name} lost the race {self.conflict_retries + 1} times; retry it"
        )

    def _receipt(
        self, tenant_id: str, command: Command, name: str, fingerprint: str
    ) -> WriteResult | None:
        if not command.request_id:
            return None
        receipt = self.find(tenant_id, Receipt.create_id(tenant_id, command.request_id), Receipt)
        if receipt is None:
            return None
        if receipt.fingerprint != fingerprint or receipt.command != name:
            raise IdempotencyKeyReusedError(
                f"request id {command.request_id!r} was already used for a different command"
            )
        return WriteResult.model_validate({**receipt.answer, "replayed": True})


def _fingerprint(command: Command) -> str:
    body: Any = command.model_dump_json(exclude={"request_id"})
    return hashlib.sha256(body.encode()).hexdigest()
