"""The knowledge card: a concept or principle. It may be renamed, merged into another card and
linked; it keeps the events where it was discussed (``evidenced_by``)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate
from domain.errors import InvalidKindError, InvalidTransitionError
from domain.values import Edge, Provenance, Scope

KNOWLEDGE_EDGES = frozenset({Edge.RELATED_TO, Edge.EVIDENCED_BY, Edge.CONTRADICTS,
                             Edge.EXTENDS, Edge.DERIVES})


class KnowledgeCard(TenantAggregate):
    @event("Created")
    def __init__(
        self, tenant_id: str, scope: Scope, memory_type: str, title: str, body: str,
        tags: tuple[str, ...], provenance: Provenance, timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        self.scope = scope
        self.memory_type = memory_type
        self.title = title
        self.body = body
        self.tags = tags
        self.provenance = provenance
        self.merged_into: UUID | None = None
        self.absorbed: list[UUID] = []
        self.links: dict[tuple[str, UUID], None] = {}
        self.verified_at: datetime = timestamp

    def _check_open(self) -> None:
        if self.merged_into is not None:
            raise InvalidTransitionError(
                f"knowledge card {self.id} was merged into {self.merged_into}; change the survivor"
            )

    def rename(self, title: str, now: datetime) -> None:
        self._check_open()
        if title != self.title:
            # body and tags travel along so a projection can re-index the card from the event alone
            self._rename(title=title, previous_title=self.title, body=self.body, tags=self.tags,
                         timestamp=now)

    def merge_into(self, survivor: KnowledgeCard, now: datetime) -> None:
        """This card points to ``survivor`` from now on; the survivor takes its tags."""
        self._check_open()
        survivor._check_open()
        if survivor.id == self.id or survivor.tenant_id != self.tenant_id:
            raise InvalidTransitionError("a knowledge card merges into another card of its tenant")
        self._merge(survivor_id=survivor.id, timestamp=now)
        new_tags = tuple(t for t in self.tags if t not in survivor.tags)
        survivor._absorb(merged_id=self.id, tags=new_tags, timestamp=now)

    def link(self, edge: Edge, target_id: UUID, now: datetime) -> None:
        self._check_open()
        if edge not in KNOWLEDGE_EDGES:
            allowed = ", ".join(sorted(e.value for e in KNOWLEDGE_EDGES))
            raise InvalidKindError(f"a knowledge card links with {allowed}, not {edge.value!r}")
        if target_id == self.id:
            raise InvalidKindError("a card cannot link to itself")
        if (edge.value, target_id) not in self.links:
            self._link(edge=edge.value, target_id=target_id, timestamp=now)

    def verify(self, now: datetime) -> None:
        self._check_open()
        self._verify(timestamp=now)

    @event("Renamed")
    def _rename(self, title: str, previous_title: str, body: str, tags: tuple[str, ...],
                timestamp: datetime) -> None:
        self.title = title

    @event("Merged")
    def _merge(self, survivor_id: UUID, timestamp: datetime) -> None:
        self.merged_into = survivor_id

    @event("Absorbed")
    def _absorb(self, merged_id: UUID, tags: tuple[str, ...], timestamp: datetime) -> None:
        self.absorbed.append(merged_id)
        self.tags = (*self.tags, *tags)

    @event("Linked")
    def _link(self, edge: str, target_id: UUID, timestamp: datetime) -> None:
        self.links[(edge, target_id)] = None

    @event("Verified")
    def _verify(self, timestamp: datetime) -> None:
        self.verified_at = timestamp
