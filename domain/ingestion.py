"""The ingestion of one conversation turn: received, extracted, applied — or dead-lettered.

A turn is first stored as an event card of the conversation (searchable at once) together with
``Received``; the extraction worker then records what the model proposed (``Extracted``), and
once the proposed cards' commands are accepted, which cards they became (``Applied``). When the
model fails after its last retry the turn is parked (``DeadLettered``) and waits for a person to
ask for a re-run (``RerunRequested``), which makes it ``received`` again. Nothing is ever dropped:
the turn's text stays in ``Received`` and its event card.

    received ──Extracted──▶ extracted ──Applied──▶ applied
       │  ▲
       │  └──RerunRequested── dead_letter
       └──DeadLettered──────────▲

One ingestion per (tenant, session, turn): its id is derived from them, so the same turn sent twice
names the same aggregate and is stored once.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from eventsourcing.domain import event

from domain.base import TenantAggregate, derived_id
from domain.errors import InvalidKindError, InvalidTimeError, InvalidTransitionError


class Role(StrEnum):
    """Who spoke the turn."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class IngestStatus(StrEnum):
    """Where a turn stands; ``str()`` of one is its value."""

    RECEIVED = "received"
    EXTRACTED = "extracted"
    APPLIED = "applied"
    DEAD_LETTER = "dead_letter"
    #: An erasure took the turn: its extraction writes nothing. The read model's word (the
    #: erasure's projection sets it); the aggregate, unreadable, stays where the erasure found it.
    ERASED = "erased"


#: The subject a turn without a ``speaker`` speaks as: the user the memory is of (extraction's
#: ``user``). Its turns are that subject's, as a named speaker's are theirs, for an erasure too.
UNNAMED_SPEAKER = "user"

#: Names ZoneInfo may resolve on some machines that are no user's zone.
_NOT_A_USER_ZONE = frozenset({"localtime", "posixrules"})


def parse_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        choices = ", ".join(r.value for r in Role)
        raise InvalidKindError(f"unknown role {role!r}; expected one of {choices}") from None


def check_zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Asia/Taipei``, ``Europe/Berlin``, ``UTC``)."""
    if name not in _NOT_A_USER_ZONE:
        try:
            return ZoneInfo(name)
        except (ValueError, OSError, KeyError):  # malformed, a folder, or not found
            pass
    raise InvalidTimeError(
        f"unknown time zone {name!r}; expected an IANA name such as 'Asia/Taipei' or 'UTC'")


class Ingestion(TenantAggregate):
    class Received(TenantAggregate.Created):
        event_card_id: UUID
        session_id: str
        turn_id: str
        role: str
        agent_id: str | None
        text: str
        said_at: datetime
        timezone: str
        #: The subject of the speaker's own facts; None: ``user``.
        speaker: str | None
        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["speaker"] = None  # received before a turn could name its speaker

    class Extracted(TenantAggregate.Event):
        candidates: tuple[dict[str, Any], ...]
        model: str
        attempts: int
        #: Candidates not written, each with ``rejected``: why (a value the turn does not support).
        rejected: tuple[dict[str, Any], ...]
        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["rejected"] = ()  # recorded before candidates were checked against the turn

    class Applied(TenantAggregate.Event):
        card_ids: tuple[str, ...]

    class DeadLettered(TenantAggregate.Event):
        error: str
        attempts: int

    class RerunRequested(TenantAggregate.Event):
        requested_by: str

    @staticmethod
    def create_id(tenant_id: str, session_id: str, turn_id: str) -> UUID:
        return derived_id("ingestion", tenant_id, session_id, turn_id)

    @event(Received)
    def __init__(
        self, tenant_id: str, event_card_id: UUID, session_id: str, turn_id: str, role: str,
        agent_id: str | None, text: str, said_at: datetime, timezone: str, timestamp: datetime,
        speaker: str | None = None,
    ) -> None:
        self.tenant_id = tenant_id
        self.event_card_id = event_card_id
        self.session_id = session_id
        self.turn_id = turn_id
        self.role = role
        self.agent_id = agent_id
        self.text = text
        self.said_at = said_at
        self.timezone = timezone
        self.speaker = speaker
        self.received_at = timestamp
        self._status = IngestStatus.RECEIVED
        self.candidates: tuple[dict[str, Any], ...] = ()
        self.rejected: tuple[dict[str, Any], ...] = ()
        self.model: str | None = None
        self.attempts = 0
        self.error: str | None = None
        self.card_ids: tuple[str, ...] = ()

    @property
    def subject(self) -> str:
        """Whose words the turn holds: its speaker, or :data:`UNNAMED_SPEAKER`."""
        return self.speaker or UNNAMED_SPEAKER

    @property
    def status(self) -> IngestStatus:
        return self._status

    # -- commands: guard, then the event ---------------------------------------------------

    def extract(self, candidates: tuple[dict[str, Any], ...], model: str, attempts: int,
                now: datetime, rejected: tuple[dict[str, Any], ...] = ()) -> None:
        """The model's validated candidates, each with its time decision and where it was
        resolved to, and those rejected, each with why."""
        self._expect("record an extraction", IngestStatus.RECEIVED)
        self._extracted(candidates=tuple(candidates), model=model, attempts=attempts,
                        rejected=tuple(rejected), timestamp=now)

    def apply(self, card_ids: tuple[str, ...], now: datetime) -> None:
        """The candidates' commands were accepted: these are the cards they wrote."""
        self.check_applicable()
        self._applied(card_ids=tuple(card_ids), timestamp=now)

    def check_applicable(self) -> None:
        """Refuse unless the extraction is recorded and its cards are not: checked before the
        cards are decided, so a turn applied already decides nothing."""
        self._expect("record applied cards", IngestStatus.EXTRACTED)

    def dead_letter(self, error: str, attempts: int, now: datetime) -> None:
        """The model failed after its last retry: park the turn, with why."""
        self._expect("dead-letter the turn", IngestStatus.RECEIVED)
        self._dead_lettered(error=error, attempts=attempts, timestamp=now)

    def request_rerun(self, requested_by: str, now: datetime) -> None:
        """Try a parked turn again: it is received once more."""
        self._expect("re-run the turn", IngestStatus.DEAD_LETTER)
        self._rerun_requested(requested_by=requested_by, timestamp=now)

    def _expect(self, doing: str, status: IngestStatus) -> None:
        if self._status is not status:
            raise InvalidTransitionError(
                f"cannot {doing}: ingested turn {self.id} is {self._status.value}, not "
                f"{status.value}")

    # -- events: deterministic appliers ----------------------------------------------------

    @event(Extracted)
    def _extracted(self, candidates: tuple[dict[str, Any], ...], model: str, attempts: int,
                   rejected: tuple[dict[str, Any], ...], timestamp: datetime) -> None:
        self.candidates = tuple(candidates)
        self.rejected = tuple(rejected)
        self.model = model
        self.attempts = attempts
        self.error = None
        self._status = IngestStatus.EXTRACTED

    @event(Applied)
    def _applied(self, card_ids: tuple[str, ...], timestamp: datetime) -> None:
        self.card_ids = tuple(card_ids)
        self._status = IngestStatus.APPLIED

    @event(DeadLettered)
    def _dead_lettered(self, error: str, attempts: int, timestamp: datetime) -> None:
        self.error = error
        self.attempts = attempts
        self._status = IngestStatus.DEAD_LETTER

    @event(RerunRequested)
    def _rerun_requested(self, requested_by: str, timestamp: datetime) -> None:
        self.error = None
        self.attempts = 0
        self._status = IngestStatus.RECEIVED
