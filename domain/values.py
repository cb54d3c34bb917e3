"""Value objects every aggregate shares: kinds, types, scopes, provenance, edges."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from domain.errors import InvalidKindError, InvalidScopeError, InvalidTenantError


class CardKind(str, Enum):
    STATE = "state"
    EVENT = "event"
    KNOWLEDGE = "knowledge"


class MemoryType(str, Enum):
    FACT = "fact"
    PREFERENCE = "preference"
    DECISION = "decision"
    COMMITMENT = "commitment"
    BLOCKER = "blocker"
    PATTERN = "pattern"
    NOTE = "note"
    EVENT = "event"


#: Which memory types each card kind takes. Episodic and semantic memories never mix.
KIND_TYPES: dict[CardKind, frozenset[MemoryType]] = {
    CardKind.STATE: frozenset(
        {MemoryType.FACT, MemoryType.PREFERENCE, MemoryType.DECISION,
         MemoryType.COMMITMENT, MemoryType.BLOCKER}
    ),
    CardKind.EVENT: frozenset({MemoryType.EVENT}),
    CardKind.KNOWLEDGE: frozenset(
        {MemoryType.NOTE, MemoryType.PATTERN, MemoryType.DECISION, MemoryType.FACT}
    ),
}


def parse_kind(kind: str | CardKind, memory_type: str | MemoryType) -> tuple[CardKind, MemoryType]:
    try:
        parsed_kind = CardKind(kind)
    except ValueError:
        choices = ", ".join(k.value for k in CardKind)
        raise InvalidKindError(f"unknown card kind {kind!r}; expected one of {choices}") from None
    try:
        parsed_type = MemoryType(memory_type)
    except ValueError:
        choices = ", ".join(t.value for t in MemoryType)
        raise InvalidKindError(
            f"unknown memory type {memory_type!r}; expected one of {choices}"
        ) from None
    if parsed_type not in KIND_TYPES[parsed_kind]:
        allowed = ", ".join(sorted(t.value for t in KIND_TYPES[parsed_kind]))
        raise InvalidKindError(
            f"a {parsed_kind.value} card cannot have memory type {parsed_type.value!r}; "
            f"allowed: {allowed}"
        )
    return parsed_kind, parsed_type


class Cardinality(str, Enum):
    SINGLE = "single_value"
    MULTI = "multi_value"


class Edge(str, Enum):
    SUPERSEDES = "supersedes"
    UPDATES = "updates"
    EXTENDS = "extends"
    DERIVES = "derives"
    RELATED_TO = "related_to"
    CONTRADICTS = "contradicts"
    EVIDENCED_BY = "evidenced_by"
    AFFECTS = "affects"


#: Edges that `revise` may draw from a new card to the card it revises.
REVISION_EDGES = frozenset({Edge.SUPERSEDES, Edge.UPDATES, Edge.EXTENDS, Edge.DERIVES})


class ScopeKind(str, Enum):
    PERSONAL = "personal"
    PROJECT = "project"
    GROUP = "group"
    GLOBAL = "global"


_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_tenant(tenant_id: str) -> str:
    if not isinstance(tenant_id, str) or not _TENANT.match(tenant_id):
        raise InvalidTenantError(
            f"tenant id {tenant_id!r} must be 1-64 characters of letters, digits, '.', '_' or '-'"
        )
    return tenant_id


@dataclass(frozen=True)
class Scope:
    """Where a card lives inside a tenant."""

    kind: ScopeKind
    project_id: str | None = None
    group_id: str | None = None

    def __post_init__(self) -> None:
        kind = ScopeKind(self.kind)
        object.__setattr__(self, "kind", kind)
        if kind is ScopeKind.PROJECT and not self.project_id:
            raise InvalidScopeError("a project-scoped card needs a project_id")
        if kind is ScopeKind.GROUP and not self.group_id:
            raise InvalidScopeError("a group-scoped card needs a group_id")
        if kind is not ScopeKind.PROJECT and self.project_id:
            raise InvalidScopeError(f"a {kind.value} card takes no project_id")
        if kind is not ScopeKind.GROUP and self.group_id:
            raise InvalidScopeError(f"a {kind.value} card takes no group_id")

    @classmethod
    def parse(cls, kind: str, project_id: str | None = None, group_id: str | None = None) -> Scope:
        try:
            scope_kind = ScopeKind(kind)
        except ValueError:
            choices = ", ".join(k.value for k in ScopeKind)
            raise InvalidScopeError(f"unknown scope {kind!r}; expected one of {choices}") from None
        return cls(scope_kind, project_id or None, group_id or None)

    @property
    def is_shared(self) -> bool:
        return self.kind is not ScopeKind.PERSONAL

    @property
    def key(self) -> str:
        """A stable text form, e.g. ``project:fibon`` or ``personal``."""
        return {
            ScopeKind.PROJECT: f"project:{self.project_id}",
            ScopeKind.GROUP: f"group:{self.group_id}",
        }.get(self.kind, self.kind.value)

    def to_dict(self) -> dict[str, str | None]:
        return {"kind": self.kind.value, "project_id": self.project_id, "group_id": self.group_id}


def check_perspective(scope: Scope, perspective: str | None) -> str | None:
    if perspective and not scope.is_shared:
        raise InvalidScopeError("only a shared-scope card (project, group, global) has a perspective")
    return perspective or None


class Source(str, Enum):
    USER_STATED = "user_stated"
    AGENT_INFERRED = "agent_inferred"
    IMPORTED = "imported"


@dataclass(frozen=True)
class Provenance:
    """Who wrote a card and how sure they were."""

    source: Source = Source.USER_STATED
    inference_confidence: float | None = None
    agent_id: str | None = None
    session_id: str | None = None
    turn_id: str | None = None

    def __post_init__(self) -> None:
        source = Source(self.source)
        object.__setattr__(self, "source", source)
        confidence = self.inference_confidence
        if source is Source.AGENT_INFERRED:
            if confidence is None:
                raise InvalidKindError("an agent_inferred card needs an inference_confidence")
            if not 0.0 <= confidence <= 1.0:
                raise InvalidKindError(
                    f"inference_confidence must lie in 0..1, got {confidence}"
                )
        elif confidence is not None:
            raise InvalidKindError(
                "inference_confidence belongs to agent_inferred cards only"
            )

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source.value,
            "inference_confidence": self.inference_confidence,
            "agent_id": self.agent_id,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Provenance:
        return cls(**data)  # type: ignore[arg-type]
