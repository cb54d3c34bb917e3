"""What the extraction model must answer, and the check each candidate card passes.

The model answers ``{"candidates": [...]}`` (:data:`CANDIDATES_SCHEMA`). An answer that is not
that shape is garbage, and the whole call is tried again; a single candidate that is malformed
(an unknown kind, a memory type its kind does not take, an empty value, a confidence outside
0..1, a control character) is dropped with its reason and the turn's other candidates kept.
Pure: no I/O; the time of each candidate is decided by :mod:`services.ingest.hints`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from domain.errors import InvalidCommandError
from domain.policy import Policy
from domain.rules.tags import normalise_tag
from domain.rules.validation import check_slot_part, check_text
from domain.values import CardKind, MemoryType, parse_kind
from services.ingest.hints import TimeDecision, decide_time

SCHEMA_NAME = "memory_candidates"
CARDINALITIES = ("single_value", "multi_value")
#: The fields of one candidate, all required (strict structured output wants every field
#: required; an absent value is ``null`` or ``[]``).
CANDIDATE_FIELDS = ("kind", "memory_type", "subject", "label", "existing_label", "value",
                    "cardinality_hint", "tags", "occurred_at_hint", "confidence", "title",
                    "related_concepts")

_TEXT: dict[str, Any] = {"type": "string"}
_TEXTS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_NULLABLE_TEXT: dict[str, Any] = {"type": ["string", "null"]}

#: The answer's JSON schema, strict-mode ready (every object closed, every field required).
#: Numeric bounds are checked here rather than in the schema: not every server takes them.
CANDIDATES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["candidates"],
    "properties": {"candidates": {"type": "array", "items": {
        "type": "object",
        "additionalProperties": False,
        "required": list(CANDIDATE_FIELDS),
        "properties": {
            "kind": {"type": "string", "enum": [k.value for k in CardKind]},
            "memory_type": {"type": "string", "enum": [t.value for t in MemoryType]},
            "subject": _TEXT,
            "label": _TEXT,
            "existing_label": _NULLABLE_TEXT,
            "value": _TEXT,
            "cardinality_hint": {"type": ["string", "null"], "enum": [*CARDINALITIES, None]},
            "tags": _TEXTS,
            "occurred_at_hint": _NULLABLE_TEXT,
            "confidence": {"type": "number"},
            "title": _NULLABLE_TEXT,
            "related_concepts": _TEXTS,
        },
    }}},
}


class GarbageAnswer(ValueError):
    """The model's answer is JSON but not ``{"candidates": [...]}``."""


class DroppedCandidate(ValueError):
    """One candidate is malformed; the message is the reason."""


@dataclass(frozen=True)
class Candidate:
    """A validated candidate card and the time decided for it."""

    kind: str
    memory_type: str
    subject: str
    label: str
    value: str
    confidence: float
    time: TimeDecision
    cardinality: str | None = None
    tags: tuple[str, ...] = ()
    title: str | None = None
    related: tuple[str, ...] = ()
    hint: str | None = None
    #: The label of a slot shown to the model that it says this card updates.
    existing_label: str | None = None
    #: Where slot resolution put the card and why (``services.ingest.resolution``), and whether
    #: its value is grounded in the text shown (``services.ingest.grounding``).
    resolution: dict[str, Any] | None = None

    def stored(self) -> dict[str, Any]:
        """A plain dict for the ``Ingestion.Extracted`` event (JSON types only)."""
        return {"kind": self.kind, "memory_type": self.memory_type, "subject": self.subject,
                "label": self.label, "value": self.value, "confidence": self.confidence,
                "time": self.time.stored(), "cardinality": self.cardinality, "tags": list(self.tags),
                "title": self.title, "related": list(self.related), "hint": self.hint,
                "existing_label": self.existing_label, "resolution": self.resolution}

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Candidate:
        return cls(**{**data, "time": TimeDecision.from_stored(data["time"]),
                      "tags": tuple(data.get("tags", ())), "related": tuple(data.get("related", ()))})


@dataclass
class Validated:
    """The candidates of one answer that passed, and why the others were dropped."""

    candidates: list[Candidate] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def candidates_of(answer: dict[str, Any]) -> list[Any]:
    """The raw candidates of an answer; :class:`GarbageAnswer` when it has no such list."""
    raw = answer.get("candidates")
    if not isinstance(raw, list):
        raise GarbageAnswer(f"the answer has no 'candidates' list: {str(answer)[:120]}")
    return raw


def validate_all(raw: list[Any], text: str, said_at: datetime, zone: ZoneInfo,
                 policy: Policy) -> Validated:
    result = Validated()
    for index, item in enumerate(raw):
        try:
            result.candidates.append(validate(item, text, said_at, zone, policy))
        except DroppedCandidate as reason:
            result.dropped.append(f"candidate {index}: {reason}")
    return result


def validate(raw: Any, text: str, said_at: datetime, zone: ZoneInfo, policy: Policy) -> Candidate:
    """One candidate the model proposed for a turn (``text`` said at ``said_at`` in ``zone``)."""
    if not isinstance(raw, dict):
        raise DroppedCandidate(f"not an object: {str(raw)[:80]}")
    kind = _word(raw, "kind")
    if kind not in {k.value for k in CardKind}:
        raise DroppedCandidate(f"unknown kind {raw.get('kind')!r}")
    memory_type = _word(raw, "memory_type") or ("event" if kind == "event" else "")
    try:
        parse_kind(kind, memory_type)
    except InvalidCommandError as error:
        raise DroppedCandidate(str(error)) from None
    value = _text(raw, "value", policy)
    if not value:
        raise DroppedCandidate("empty value")
    subject = _text(raw, "subject", policy) or "user"
    label = _text(raw, "label", policy)
    if kind == "state":
        _slot_part(subject, "subject")
        _slot_part(label, "label")
    title = _text(raw, "title", policy) if kind == "knowledge" else ""
    hint = raw.get("occurred_at_hint")
    hint = hint if isinstance(hint, str) else None
    cardinality = raw.get("cardinality_hint")
    existing = raw.get("existing_label")
    return Candidate(
        kind=kind, memory_type=memory_type, subject=subject, label=label, value=value,
        confidence=_confidence(raw.get("confidence")),
        time=decide_time(hint, text, said_at, zone, policy.clock_skew),
        cardinality=cardinality if cardinality in CARDINALITIES else None,
        tags=_tags(raw.get("tags"), policy),
        title=(title or label or value.splitlines()[0][:120]) if kind == "knowledge" else None,
        related=_names(raw.get("related_concepts"), policy) if kind == "knowledge" else (),
        hint=hint,
        existing_label=existing.strip() or None if isinstance(existing, str) else None,
    )


def _word(raw: dict[str, Any], name: str) -> str:
    value = raw.get(name)
    return value.strip().lower() if isinstance(value, str) else ""


def _text(raw: dict[str, Any], name: str, policy: Policy) -> str:
    value = raw.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DroppedCandidate(f"{name} is not text: {value!r}")
    value = value.strip()
    try:
        check_text(value, name)
    except InvalidCommandError as error:
        raise DroppedCandidate(str(error)) from None
    if len(value) > policy.max_content_chars:
        raise DroppedCandidate(f"{name} has {len(value)} characters; the limit is {policy.max_content_chars}")
    return value


def _slot_part(text: str, name: str) -> None:
    try:
        check_slot_part(text, name)
    except InvalidCommandError as error:
        raise DroppedCandidate(f"a state card needs a {name}: {error}") from None


def _confidence(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DroppedCandidate(f"confidence {value!r} is not a number")
    if not 0.0 <= value <= 1.0:
        raise DroppedCandidate(f"confidence {value} lies outside 0..1")
    return float(value)


def _names(value: Any, policy: Policy) -> tuple[str, ...]:
    """Distinct non-empty texts of a list; items that are not clean text are left out."""
    if not isinstance(value, list):
        return ()
    seen: dict[str, None] = {}
    for item in value:
        if isinstance(item, str) and item.strip() and len(item) <= policy.max_tag_chars * 4:
            try:
                seen.setdefault(check_text(item.strip(), "related_concepts"), None)
            except InvalidCommandError:
                continue
    return tuple(seen)


def _tags(value: Any, policy: Policy) -> tuple[str, ...]:
    """Normalised tags (``domain.rules.tags``): too long or unclean ones are left out, at most
    ``policy.max_tags`` kept, so a chatty model cannot make the card's command fail."""
    tags: dict[str, None] = {}
    for name in _names(value, policy):
        if len(name) <= policy.max_tag_chars and (tag := normalise_tag(name)):
            tags.setdefault(tag, None)
    return tuple(tags)[:policy.max_tags]
