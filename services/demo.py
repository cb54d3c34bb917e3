"""`palimpsest demo`: two months of one user's life, written through the real commands.

The user moves Taipei → Kyoto → Kaohsiung, picks up skills, corrects a typo in the same turn,
watches a launch date flip-flop until the third change in 30 days lands in the arbitration queue, and lets
a commitment expire. Then it prints every slot: its current value and its whole history on both
timelines (world time: valid from/to; system time: recorded/retracted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID, uuid4

from services.commands import CorrectEvent, Move, Remember, Verify, WriteResult
from services.memory import Palimpsest
from services.views import SlotView, pending_cases, slot_view

TAIPEI = timezone(timedelta(hours=8), "Asia/Taipei")
START = datetime(2026, 9, 1, 9, 0, tzinfo=TAIPEI)


@dataclass
class SimulatedClock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def day(self, n: int, hour: int = 9, minute: int = 0) -> None:
        self.now = START + timedelta(days=n, hours=hour - 9, minutes=minute)


@dataclass
class Script:
    app: Palimpsest
    clock: SimulatedClock
    tenant_id: str
    say: Callable[[str], None]
    slots: dict[str, UUID] = field(default_factory=dict)
    cases: list[UUID] = field(default_factory=list)
    others: list[tuple[str, UUID]] = field(default_factory=list)

    def state(self, label: str, value: str, **extra: object) -> WriteResult:
        subject = str(extra.pop("subject", "user"))
        command = Remember(kind="state", memory_type=str(extra.pop("memory_type", "fact")),
                           subject=subject, label=label, content=value, **extra)  # type: ignore[arg-type]
        result = self.app.remember(self.tenant_id, command)
        self.slots.setdefault(label, result.aggregate_id)  # type: ignore[arg-type]
        if result.case_id:
            self.cases.append(result.case_id)
        self._log(f"{label} = {value!r}", result)
        return result

    def other(self, what: str, result: WriteResult) -> WriteResult:
        if result.card_id and result.outcome in ("recorded", "learned", "open", "active"):
            self.others.append((what.split(":")[0], result.card_id))
        self._log(what, result)
        return result

    def _log(self, what: str, result: WriteResult) -> None:
        reason = f" ({result.reason})" if result.reason else ""
        self.say(f"  {self.clock.now:%Y-%m-%d %H:%M}  {what:<48} → {result.outcome}{reason}")


def run_demo(app: Palimpsest, clock: SimulatedClock, say: Callable[[str], None]) -> Script:
    tenant_id = f"demo-{uuid4().hex[:8]}"
    s = Script(app, clock, tenant_id, say)
    say(f"Writing two months of history for tenant {tenant_id} …")
    remember = app.remember

    clock.day(0)
    s.state("address", "Taipei")
    s.state("job_title", "Backend engineer")
    s.state("skills", "Python")
    s.state("launch_date", "2026-11-01", subject="fibon", scope="project", project_id="fibon",
            memory_type="decision")
    clock.day(5, 15)
    kickoff = s.other("event: fibon kickoff meeting", remember(tenant_id, Remember(
        kind="event", memory_type="event", content="Kickof meeting for fibon; scope agreed",
        occurred_at=clock.now - timedelta(hours=4), scope="project", project_id="fibon",
        tags=("fibon", "會議"))))
    clock.day(10)
    s.state("skills", "PostgreSQL")
    s.state("interests", "Hiking")
    clock.day(12)
    s.other("knowledge: JWT stateless auth", remember(tenant_id, Remember(
        kind="knowledge", memory_type="pattern", title="JWT stateless auth",
        content="Sign short-lived JWTs; keep no session state on the server.",
        tags=("JWT", "後端", "資料庫"), links=(kickoff.card_id,))))  # type: ignore[arg-type]
    clock.day(14)
    s.state("address", "Kyoto")
    clock.day(15)
    s.state("launch_date", "2026-11-15", subject="fibon", scope="project", project_id="fibon",
            memory_type="decision")
    clock.day(18, 10, 0)
    s.state("job_title", "Staff engineer", session_id="s-42", turn_id="t-7")
    clock.day(18, 10, 1)
    s.state("job_title", "Senior engineer", session_id="s-42", turn_id="t-7")
    clock.day(20)
    due = clock.now + timedelta(days=10)
    doc = s.other("commitment: send design doc (due in 10 days)", remember(tenant_id, Remember(
        kind="state", memory_type="commitment", content="Send the fibon design doc to Mei",
        owner="user", due_at=due)))
    blocker = s.other("blocker: waiting on legal review", remember(tenant_id, Remember(
        kind="state", memory_type="blocker", content="Open-source licence waits on legal review",
        scope="project", project_id="fibon")))
    clock.day(31)
    s.other("commitment expires", app.move(tenant_id, Move(card_id=doc.card_id, to="expire")))  # type: ignore[arg-type]
    clock.day(35)
    s.state("launch_date", "2026-11-20", subject="fibon", scope="project", project_id="fibon",
            memory_type="decision")
    clock.day(40)
    s.state("launch_date", "2026-11-22", subject="fibon", scope="project", project_id="fibon",
            memory_type="decision")
    clock.day(45)
    s.state("address", "Kaohsiung")
    clock.day(50)
    s.other("event description corrected", app.correct(tenant_id, CorrectEvent(
        card_id=kickoff.card_id, description="Kickoff meeting for fibon; scope agreed",  # type: ignore[arg-type]
        reason="typo in the summary")))
    s.other("blocker archived", app.move(tenant_id, Move(
        card_id=blocker.card_id, to="archive", note="legal approved")))  # type: ignore[arg-type]
    clock.day(53, 20)
    s.other("event: gave a talk", remember(tenant_id, Remember(
        kind="event", memory_type="event",
        content="Gave a talk on PostgreSQL indexing at the Kaohsiung Python meetup 高雄聚會",
        occurred_at=clock.now - timedelta(hours=2), tags=("talk", "PostgreSQL", "演講"))))
    clock.day(55)
    s.state("skills", "Python (expert)", item_key="python")
    clock.day(60)
    s.other("verify: job title still accurate", app.verify(
        tenant_id, s.slots["job_title"], Verify()))  # type: ignore[arg-type]
    return s


def render(view: SlotView) -> list[str]:
    def when(moment: datetime | None) -> str:
        return moment.astimezone(TAIPEI).strftime("%Y-%m-%d %H:%M") if moment else "—"

    current = ", ".join(repr(c.value) for c in view.current) or "(none)"
    lines = [f"■ {view.scope} / {view.subject} / {view.label}  [{view.cardinality}]",
             f"  current: {current}",
             "  history:  value                    valid from        valid to"
             "          recorded          retracted"]
    for card in view.history:
        mark = "*" if card.current else " "
        edge = f"  {card.edge} {str(card.edge_target)[:8]}" if card.edge else ""
        lines.append(
            f"   {mark} {card.value[:22]:<22}  {when(card.valid_from)}  {when(card.valid_to):<16}"
            f"  {when(card.recorded_at)}  {when(card.retracted_at):<16}{edge}"
        )
    for pending in view.pending:
        lines.append(f"  pending arbitration: {pending.value!r} — {pending.reason}")
    lines.append("  audit trail:")
    lines.extend(
        f"    v{e.version:<2} {when(e.recorded_at)}  {e.event:<12} {e.detail}" for e in view.audit
    )
    return lines


def print_report(script: Script, say: Callable[[str], None]) -> None:
    say("")
    say("Slots — current value and full history (world time: valid; system time: recorded)")
    for slot_id in script.slots.values():
        for line in render(slot_view(script.app, script.tenant_id, slot_id)):
            say(line)
        say("")
    say("Other cards:")
    for kind, card_id in script.others:
        say(f"  {kind}: {describe(script.app, script.tenant_id, card_id)}")
    say("")
    say("Arbitration queue:")
    for line in pending_cases(script.app, script.tenant_id, script.cases):
        say(f"  {line}")


def describe(app: Palimpsest, tenant_id: str, card_id: UUID) -> str:
    """One line for an event, knowledge, commitment or blocker card."""
    from domain.commitment import Blocker, Commitment
    from domain.event_card import EventCard
    from domain.knowledge import KnowledgeCard

    if card := app.find(tenant_id, card_id, EventCard):
        fixes = f"; corrected from {card.corrections[0][0]!r}" if card.corrections else ""
        return f"{card.description!r} occurred {card.occurred_at:%Y-%m-%d %H:%M}{fixes}"
    if knowledge := app.find(tenant_id, card_id, KnowledgeCard):
        return (f"{knowledge.title!r} tags {list(knowledge.tags)}, "
                f"evidenced_by {len(knowledge.links)} event(s)")
    if commitment := app.find(tenant_id, card_id, Commitment):
        due = f"{commitment.due_at:%Y-%m-%d}" if commitment.due_at else "no due date"
        return f"{commitment.description!r} owner {commitment.owner}, due {due}: {commitment.status.value}"
    blocker = app.load(tenant_id, card_id, Blocker, "blocker")
    return f"{blocker.description!r}: {'active' if blocker.active else 'archived'}"


def print_read_models(script: Script, settings: Any, say: Callable[[str], None]) -> None:
    """Project the log into the read models and ask them bi-temporal questions."""
    from infra.postgres import admin_database, runtime_database
    from projections.worker import project_log
    from services.readmodels import ReadModels

    admin = admin_database(settings)
    applied, embedded = project_log(settings, script.app, admin=admin)
    say(f"Read models: projected {applied} event(s) from the log, embedded {embedded} card(s) "
        "(`palimpsest pipeline` does the same through Kafka and Faust).")
    reads = ReadModels(runtime_database(admin, settings), settings.read_schema)
    tenant = script.tenant_id
    try:
        now = script.clock.now
        day20 = START + timedelta(days=20)

        def address(valid_at: datetime, known_at: datetime) -> str:
            found = [c.content for c in reads.as_of(tenant, valid_at, known_at, subject="user")
                     if c.label == "address"]
            return ", ".join(found) or "(nothing)"

        slip = START + timedelta(days=18, hours=1, seconds=30)

        def job(known_at: datetime) -> str:
            found = [c.content for c in reads.as_of(tenant, slip, known_at, subject="user")
                     if c.label == "job_title"]
            return ", ".join(found) or "(nothing)"

        answers = [
            ("address now", address(now, now)),
            (f"address on {day20:%Y-%m-%d}, as we know it now", address(day20, now)),
            (f"address on {day20:%Y-%m-%d}, as we knew it that day", address(day20, day20)),
            (f"job title at {slip:%Y-%m-%d %H:%M:%S}, as believed then", job(slip)),
            (f"job title at {slip:%Y-%m-%d %H:%M:%S}, as known now", job(now)),
        ]
        for question, answer in answers:
            say(f"  {question + ':':<52} {answer}")
        current = [c.content for c in reads.current(tenant, subject="user") if c.label == "skills"]
        say(f"  {'skills now:':<52} {', '.join(current)}")
    finally:
        reads.close()
    ask_questions(script, settings, say)


QUESTIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("a current question", "where does the user live?", {}),
    ("an as-of question (as we knew things on 2026-09-21)", "使用者住在哪裡？",
     {"valid_at": START + timedelta(days=20), "known_at": START + timedelta(days=20)}),
    ("a temporal question", "上週我做了什麼？", {}),
    ("the same in English", "what did I do last week?", {}),
    ("a question that meets the pending arbitration", "when is the fibon launch?",
     {"project_id": "fibon"}),
)


def ask_questions(script: Script, settings: Any, say: Callable[[str], None]) -> None:
    """Ask the read models the questions an assistant would, through the fused retrieval."""
    from services.context import render
    from services.factory import create_queries

    queries = create_queries(settings.model_copy(update={"time_zone": "Asia/Taipei"}), script.clock)
    try:
        say("")
        say(f"Questions, asked on {script.clock.now:%Y-%m-%d %H:%M} ({settings.data_dir}/, "
            f"`palimpsest search QUERY --tenant {script.tenant_id}` asks your own):")
        last = None
        for title, text, options in QUESTIONS:
            last = queries.search(script.tenant_id, queries.query(text, **options))
            say(f"  ▸ {title}: {text}")
            for rank, card in enumerate(last.results[:3], start=1):
                when = card.occurred_at if card.kind == "event" else card.valid_from
                flag = " [superseded since]" if card.superseded else ""
                say(f"      {rank}. {card.value}  ({card.kind}, {when:%Y-%m-%d}){flag}")
            for case in last.alerts.arbitrations:
                say(f"      ⚠ pending arbitration on {case.subject}/{case.label}: "
                    f"{', '.join(case.current_values)} (current) vs {case.proposed_value} (proposed)")
        if last is not None:
            say("")
            say("The prompt context for the last question (`palimpsest context`):")
            for line in render(last, queries.zone).splitlines():
                say(f"    {line}")
    finally:
        queries.close()
