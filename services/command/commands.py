"""What callers send (commands) and what they get back (results): plain pydantic data.

No command carries a tenant: the tenant comes from the caller's credentials and is passed beside it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from domain.errors import InvalidKindError
from domain.values import Provenance, Scope, Source, check_perspective


class Command(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: A client's id for this request: the same id twice stores one event and answers the same.
    request_id: str | None = Field(default=None, min_length=1, max_length=200)


class Authored(Command):
    """Who writes, and how sure they are."""

    source: str = "user_stated"
    inference_confidence: float | None = None
    agent_id: str | None = None
    session_id: str | None = None
    turn_id: str | None = None

    def provenance(self) -> Provenance:
        try:
            source = Source(self.source)
        except ValueError:
            choices = ", ".join(s.value for s in Source)
            raise InvalidKindError(f"unknown source {self.source!r}; expected one of {choices}"
                                   ) from None
        return Provenance(source, self.inference_confidence, self.agent_id, self.session_id,
                          self.turn_id)


class Scoped(Authored):
    scope: str = "personal"
    project_id: str | None = None
    group_id: str | None = None
    perspective: str | None = None

    def parsed_scope(self) -> Scope:
        return Scope.parse(self.scope, self.project_id, self.group_id)

    def parsed_perspective(self) -> str | None:
        return check_perspective(self.parsed_scope(), self.perspective)


class Remember(Scoped):
    """Write one card. ``kind`` and ``memory_type`` pick what it becomes:

    - ``state`` (fact, preference, decision): a value of the slot ``subject`` / ``label``;
      ``state`` + ``commitment``: a commitment (``owner``, ``due_at``); ``state`` + ``blocker``;
    - ``event``: something that happened at ``occurred_at``;
    - ``knowledge`` (note, pattern, decision, fact): a concept titled ``title``.
    """

    kind: str
    memory_type: str
    content: str
    subject: str | None = None
    label: str | None = None
    cardinality: str | None = None
    item_key: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    #: A state's statement time, when it was made before now (a backfill of old conversations):
    #: arbitration (rule 4) judges the change as of then. Never after now.
    stated_at: datetime | None = None
    occurred_at: datetime | None = None
    title: str | None = None
    tags: tuple[str, ...] = ()
    owner: str | None = None
    due_at: datetime | None = None
    #: Cards this one is linked to on creation: an event ``affects`` states, knowledge is
    #: ``evidenced_by`` events.
    links: tuple[UUID, ...] = ()


class Revise(Authored):
    """Revise a state card with a new value, drawing a typed edge to it."""

    card_id: UUID
    content: str
    edge: str = "supersedes"
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class Verify(Command):
    """Confirm a card still holds; resets its aging clock. Without a card id, a single-value
    slot's current card."""

    card_id: UUID | None = None


class CorrectEvent(Authored):
    card_id: UUID
    description: str
    reason: str
    occurred_at: datetime | None = None


class Rename(Command):
    card_id: UUID
    title: str


class Merge(Command):
    card_id: UUID
    into: UUID


class Link(Command):
    card_id: UUID
    edge: str
    target_id: UUID


class Arbitrate(Command):
    """Decide a slot's pending case: ``keep_old`` (reject every proposal), ``accept_new`` (the
    latest proposal, or the one ``card_id`` names), ``both_valid`` (each proposal on its own
    stretch of world time; a separate item of a multi-value slot)."""

    case_id: UUID
    decision: str
    decided_by: str = Field(min_length=1, max_length=200)
    note: str = ""
    #: The proposal ``accept_new`` takes, when not the latest (the queued write's ``card_id``).
    card_id: UUID | None = None


class Move(Command):
    """Move a commitment (``wait``, ``resolve``, ``expire``) or archive a blocker (``archive``)."""

    card_id: UUID
    to: str
    note: str = ""


class WriteResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    outcome: str
    card_id: UUID | None = None
    #: The aggregate the card lives in: its slot for state cards, the card itself otherwise.
    aggregate_id: UUID | None = None
    case_id: UUID | None = None
    reason: str | None = None
    #: The notification id of the last event stored; None when a retried request was answered
    #: from its receipt.
    position: int | None = None
    replayed: bool = False


class IngestTurn(Command):
    """One conversation turn to store and extract from. ``said_at``: when it was said (aware; a
    backfill of old conversations keeps their times); ``timezone``: the user's IANA zone, against
    which the extraction resolves relative times (昨天, last week)."""

    session_id: str = Field(min_length=1, max_length=200)
    turn_id: str = Field(min_length=1, max_length=200)
    #: user, assistant, system or tool.
    role: str
    text: str
    said_at: datetime
    timezone: str = "UTC"
    agent_id: str | None = Field(default=None, max_length=200)
    #: Who speaks: the subject the turn's first-person facts are written under ("I moved to
    #: Kyoto" → this subject's address). Default ``user``; a platform serving many people in one
    #: tenant names each (their user id).
    speaker: str | None = Field(default=None, min_length=1, max_length=400)


class IngestResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    ingestion_id: UUID
    #: The turn's episodic record, searchable once projected.
    event_card_id: UUID
    #: The notification id of the last event stored; None when the turn was stored before.
    position: int | None = None
    #: The same turn (tenant, session, turn) was stored before: nothing new was stored.
    replayed: bool = False


class RerunIngestion(Command):
    ingestion_id: UUID
    requested_by: str = Field(min_length=1, max_length=200)


class RecordExtraction(Command):
    """The extraction worker's validated candidates for a turn (plain JSON-valued dicts, each
    with its time decision and its slot resolution), those rejected (each with why), the model
    that made them and how many calls it took."""

    ingestion_id: UUID
    candidates: tuple[dict[str, Any], ...]
    rejected: tuple[dict[str, Any], ...] = ()
    model: str = Field(min_length=1, max_length=200)
    attempts: int = Field(ge=0)


class RecordApplied(Command):
    ingestion_id: UUID
    card_ids: tuple[UUID, ...]


class RecordDeadLetter(Command):
    ingestion_id: UUID
    error: str
    attempts: int = Field(ge=0)


class ReviewProposal(Command):
    """Accept or reject a consolidation proposal (``decision``: accept | reject). Accepting runs
    the ordinary command its edge names first (merge, link, revise)."""

    proposal_id: UUID
    decision: str
    reviewed_by: str = Field(min_length=1, max_length=200)
    note: str = Field(default="", max_length=2_000)


class Erase(Command):
    """Forget one unit (``domain.erasure``): a card (``card_id``), a slot (``slot_id``, or
    ``subject`` and ``label`` in ``scope``), a subject (``subject``), an ingested session
    (``session_id``) or the whole tenant. ``basis``: the legal basis or kind of request;
    ``reason``: why, in words (sealed like every text; write no personal text in it)."""

    unit: str
    card_id: UUID | None = None
    slot_id: UUID | None = None
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    label: str | None = Field(default=None, min_length=1, max_length=200)
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    scope: str = "personal"
    project_id: str | None = None
    group_id: str | None = None
    basis: str = Field(default="request", min_length=1, max_length=100)
    reason: str = Field(default="", max_length=2_000)
    requested_by: str = Field(default="caller", min_length=1, max_length=200)

    def parsed_scope(self) -> Scope:
        return Scope.parse(self.scope, self.project_id, self.group_id)


class ErasureResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    erasure_id: UUID
    unit: str
    #: How many data keys were destroyed, and the cards that became tombstones.
    keys_destroyed: int
    card_ids: tuple[UUID, ...] = ()
    #: The notification id of the erasure's event; None when a retried request was answered
    #: from its receipt.
    position: int | None = None
    replayed: bool = False
