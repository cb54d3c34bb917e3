"""A tenant's memory of two people, written through every path that stores personal text, each
text holding a canary of its person: the story the erasure tests forget one person of.

Every text a person's canary is in — a single-value slot superseded and contested (an arbitration
case), a multi-value item revised, an event corrected, knowledge with tags renamed, merged and
proposed, a commitment, an ingested turn extracted and one dead-lettered — belongs to that
person's subject or to their session: erasing both forgets all of it. Canaries are lower-case
words with digits (no stemmer changes them), so a search of any dump for them is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

from services.command.commands import (
    Arbitrate,
    CorrectEvent,
    Erase,
    IngestTurn,
    Merge,
    Move,
    Remember,
    Rename,
    ReviewProposal,
)
from services.command.consolidation import Propose
from tests.support import Clock, state


@dataclass
class Person:
    """One person's part of the story: their subject, session, canaries and what was written."""

    subject: str
    session: str
    prefix: str
    cards: dict[str, UUID] = field(default_factory=dict)
    slots: dict[str, UUID] = field(default_factory=dict)
    turns: list[UUID] = field(default_factory=list)
    case_id: UUID | None = None

    def canary(self, name: str) -> str:
        return f"{self.prefix}{name}"

    @property
    def canaries(self) -> list[str]:
        """Every canary of the person, their subject's name included."""
        return [self.subject.lower(), *(self.canary(name) for name in CANARIES)]

    @property
    def projected(self) -> list[str]:
        """The canaries a read model holds (not an event's reason, nor what extraction made)."""
        return [c for c in self.canaries if not c.endswith(UNPROJECTED)]


#: The canaries' names: one per text written.
CANARIES = ("city1", "city2", "city3", "launch1", "launch2", "launch3", "launch4", "skill1",
            "skill2", "item", "cafe", "cafe2", "fixreason", "etag", "title1", "title2", "body1",
            "ktag1", "body2", "ktag2", "body3", "why", "note", "promise", "wait", "turn1",
            "cand", "turn2", "error", "perspective")
#: Texts kept only in the log: a correction's and a wait's reason, the model's candidates.
UNPROJECTED = ("fixreason", "wait", "cand")


def person(name: str) -> Person:
    """A person with fresh canaries (``zq<name><hex>``): no other test's texts hold them."""
    prefix = f"zq{name}{uuid4().hex[:6]}"
    return Person(subject=prefix.capitalize(), session=f"session-{uuid4().hex[:8]}", prefix=prefix)


def tell(app: Any, tenant: str, clock: Clock, who: Person) -> Person:
    """Write ``who``'s part of the story (see the module's notes)."""
    c, s, session = who.canary, who.subject, who.session

    def remember(command: Remember) -> Any:
        clock.advance(hours=1)
        return app.remember(tenant, command)

    first = remember(state("home_city", c("city1"), subject=s, session_id=session, turn_id="1"))
    who.cards["city1"], who.slots["home_city"] = first.card_id, first.aggregate_id
    clock.advance(days=1)
    who.cards["city2"] = remember(state("home_city", c("city2"), subject=s)).card_id
    clock.advance(days=1)
    who.cards["city3"] = remember(state("home_city", c("city3"), subject=s,
                                        valid_from=clock.now - timedelta(days=30))).card_id
    for n in (1, 2, 3, 4):  # changed thrice a day apart: the fourth is queued for arbitration
        clock.advance(days=1)
        written = remember(state("launch_date", c(f"launch{n}"), subject=s))
        who.slots["launch_date"] = written.aggregate_id
        who.case_id = written.case_id or who.case_id
    skill = remember(state("skills", c("skill1"), subject=s, cardinality="multi_value",
                           item_key=c("item")))
    who.cards["skill"], who.slots["skills"] = skill.card_id, skill.aggregate_id
    clock.advance(days=1)
    remember(state("skills", c("skill2"), subject=s, cardinality="multi_value", item_key=c("item")))
    event = remember(Remember(kind="event", memory_type="event", content=f"met at {c('cafe')}",
                              tags=(c("etag"),), session_id=session, turn_id="2",
                              scope="project", project_id="project-1",
                              perspective=c("perspective")))
    who.cards["event"] = event.card_id
    clock.advance(hours=1)
    app.correct(tenant, CorrectEvent(card_id=event.card_id, description=f"met at {c('cafe2')}",
                                     reason=c("fixreason")))
    notes = [remember(Remember(kind="knowledge", memory_type="note", title=c(title),
                               content=c(body), tags=tags, session_id=session)).card_id
             for title, body, tags in (("title1", "body1", (c("ktag1"),)),
                                       ("body2", "body2", (c("ktag2"),)),
                                       ("body3", "body3", ()))]
    who.cards.update(note1=notes[0], note2=notes[1], note3=notes[2])
    clock.advance(hours=1)
    app.rename(tenant, Rename(card_id=notes[0], title=c("title2")))
    app.merge(tenant, Merge(card_id=notes[1], into=notes[0]))
    proposed = app.propose(tenant, Propose(kind="duplicate", src_id=notes[0], dst_id=notes[2],
                                           edge="merge", rationale=c("why"), score=0.9))
    app.record_review(tenant, ReviewProposal(proposal_id=proposed.aggregate_id, decision="reject",
                                             reviewed_by="reviewer", note=c("note")))
    who.cards["promise"] = remember(Remember(kind="state", memory_type="commitment",
                                             content=f"send {c('promise')}", owner=s,
                                             due_at=clock.now + timedelta(days=3))).card_id
    app.move(tenant, Move(card_id=who.cards["promise"], to="wait", note=c("wait")))
    for n, text in ((1, c("turn1")), (2, c("turn2"))):
        clock.advance(minutes=1)
        turn = app.ingest_turn(tenant, IngestTurn(session_id=session, turn_id=f"t{n}", role="user",
                                                  text=f"I said {text}", said_at=clock.now))
        who.turns.append(turn.ingestion_id)
        who.cards[f"turn{n}"] = turn.event_card_id
    app.record_extraction(tenant, who.turns[0], [{"kind": "event", "content": c("cand")}], "m", 1)
    app.record_applied(tenant, who.turns[0], [who.cards["turn1"]])
    app.record_dead_letter(tenant, who.turns[1], f"the model failed on {c('error')}", 3)
    return who


def arbitrate(app: Any, tenant: str, who: Person) -> None:
    """Settle the person's arbitration case (both values hold, each on its own stretch)."""
    assert who.case_id is not None, "the story queues a write for arbitration"
    app.arbitrate(tenant, Arbitrate(case_id=who.case_id, decision="both_valid",
                                    decided_by="reviewer"))


def forget(app: Any, tenant: str, who: Person) -> list[Any]:
    """Erase the person: their subject, then their session."""
    return [app.erase(tenant, Erase(unit="subject", subject=who.subject, basis="gdpr-17",
                                    reason="asked by email", requested_by="dpo")),
            app.erase(tenant, Erase(unit="session", session_id=who.session, basis="gdpr-17",
                                    requested_by="dpo"))]
