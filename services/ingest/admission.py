"""Between the model's answer and the commands: which candidates are written, and where.

:class:`Admission` takes the validated candidates of one turn and, for each, checks that its value
is grounded in the text the model was shown (:mod:`services.ingest.grounding`) — an ungrounded
one is rejected, with why — and resolves a state card's subject and label, or a commitment's
owner, against the tenant's slots (:mod:`services.ingest.resolution`, DESIGN rule 12). Slots the
turn's own candidates open count as known to the candidates after them, so one turn cannot open
two twins. What it decides is recorded in ``Ingestion.Extracted`` before any card is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

from domain.proposal import ProposalEdge, ProposalKind
from domain.rules.cardinality import normalise_label
from domain.values import Cardinality
from services.command.commands import Remember
from services.command.consolidation import Propose
from services.ingest.candidates import Candidate
from services.ingest.catalogue import Similarity
from services.ingest.grounding import support
from services.ingest.resolution import (
    Decision,
    KnownSlot,
    Thresholds,
    concept_cardinality,
    resolve,
    resolve_subject,
)


@dataclass
class Admitted:
    """The candidates to write, each with its ``resolution``, and the rejected ones (the
    candidate's stored form with ``rejected``: why)."""

    candidates: list[Candidate] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)


class Admission:
    """Grounding and slot resolution with ``similarity`` (None: words and names only)."""

    def __init__(self, similarity: Similarity | None, thresholds: Thresholds,
                 grounding_floor: float) -> None:
        self.similarity = similarity
        self.thresholds = thresholds
        self.grounding_floor = grounding_floor

    def warm_up(self) -> None:
        """Load the embedding model now rather than on the first candidate."""
        if self.similarity is not None:
            self.similarity.warm_up()

    def prepare(self, work: Iterable[tuple[Sequence[Candidate], Sequence[KnownSlot]]]) -> None:
        """Embed in one batch what admitting each turn's ``candidates`` against its catalogue
        may compare: the label and stated value of each slot candidate and of the slots of the
        subject it resolves to (a batch costs less a text than one text at a time)."""
        if self.similarity is None:
            return
        pairs: list[tuple[str, str | None]] = []
        for candidates, catalogue in work:
            subjects = list(dict.fromkeys(slot.subject for slot in catalogue))
            whose: set[str] = set()
            for candidate in candidates:
                if candidate.kind == "state" and candidate.memory_type not in ("commitment",
                                                                               "blocker"):
                    pairs.append((candidate.label, candidate.value))
                    whose.add(resolve_subject(candidate.subject, subjects)[0])
            pairs += [(slot.label, slot.values[0] if slot.values else None)
                      for slot in catalogue if slot.subject in whose]
        self.similarity.warm(pairs)

    def admit(self, candidates: Sequence[Candidate], shown: Sequence[str],
              catalogue: Sequence[KnownSlot]) -> Admitted:
        """``candidates`` of a turn whose model was shown the texts ``shown`` (the turn first),
        resolved against ``catalogue``."""
        admitted = Admitted()
        known = list(catalogue)
        similar = self.similarity.to_each if self.similarity is not None else None
        for candidate in candidates:
            grounded = support(candidate.value, shown, similar, self.grounding_floor)
            if not grounded.grounded:
                admitted.rejected.append({**candidate.stored(), "rejected": grounded.reason})
                continue
            placed = self._placed(candidate, known, grounded.reason)
            if placed.kind == "state" and placed.memory_type not in ("commitment", "blocker"):
                known.append(KnownSlot(placed.subject, placed.label, placed.cardinality or "",
                                       (placed.value,)))
            admitted.candidates.append(placed)
        return admitted

    def _placed(self, candidate: Candidate, known: Sequence[KnownSlot], grounding: str) -> Candidate:
        if candidate.kind != "state":
            return replace(candidate, resolution={"grounding": grounding})
        if candidate.memory_type in ("commitment", "blocker"):  # owned, in no slot
            owner, why = resolve_subject(candidate.subject, [slot.subject for slot in known])
            return replace(candidate, subject=owner,
                           resolution={"subject": owner, "reason": f"owner: {why}",
                                       "grounding": grounding})
        closeness = self.similarity.closeness if self.similarity is not None else None
        resolution = resolve(candidate.subject, candidate.label, candidate.value,
                             candidate.existing_label, known, closeness, self.thresholds)
        recorded = {**resolution.stored(), "grounding": grounding,
                    "proposed": {"subject": candidate.subject, "label": candidate.label}}
        cardinality = candidate.cardinality
        if cardinality is None and resolution.decision is not Decision.REUSED:
            cardinality = concept_cardinality(resolution.label)  # the new slot's, by its concept
            recorded["cardinality"] = cardinality and f"{cardinality}, as the labels of its concept"
        return replace(candidate, subject=resolution.subject, label=resolution.label,
                       cardinality=cardinality, resolution=recorded)


def near_twin(candidate: dict[str, Any]) -> dict[str, Any] | None:
    """The resolution of a recorded candidate found a near twin of another slot, if it was."""
    resolution = candidate.get("resolution")
    if resolution and resolution.get("decision") == Decision.NEAR_TWIN.value:
        return dict(resolution)
    return None


def twin_proposal(app: Any, tenant_id: str, command: Remember, card_id: UUID,
                  resolution: dict[str, Any]) -> Propose | None:
    """The consolidation proposal for a card that opened a slot near ``twin`` (a label of the
    same subject): the card's value takes the place of the twin's current one (supersedes; in a
    multi-value twin, the newest item is revised to read as it) once a person accepts. None when
    the twin holds no current value."""
    assert command.subject is not None and command.label is not None
    scope, twin = command.parsed_scope(), str(resolution["twin"])
    _, slot = app.live_slot(tenant_id, scope, command.subject, normalise_label(twin))
    current = sorted(slot.current_cards, key=lambda c: c.valid_from) if slot is not None else []
    if not current:
        return None
    single = slot.cardinality is Cardinality.SINGLE
    return Propose(
        kind=(ProposalKind.CONTRADICTION if single else ProposalKind.DUPLICATE).value,
        src_id=current[-1].card_id, dst_id=card_id,
        edge=(ProposalEdge.SUPERSEDES if single else ProposalEdge.UPDATES).value,
        rationale=(f"{command.subject}/{normalise_label(command.label)} was opened beside "
                   f"{command.subject}/{twin}, whose label sits close to it: if both name one attribute, "
                   f"\"{_quote(command.content)}\" takes the place of \"{_quote(current[-1].value)}\""),
        score=min(1.0, max(0.0, float(resolution.get("score") or 0.0))),
        request_id=f"{command.request_id}:twin")


def _quote(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
