"""`palimpsest demo`: two months of one user's life, written through the REST client.

The user moves Taipei → Kyoto → Kaohsiung, picks up skills, corrects a typo in the same turn,
watches a launch date flip-flop until the third change in 30 days lands in the arbitration queue,
and lets a commitment expire. Every write goes through :class:`palimpsest_client.Client` to a
running server — ``palimpsest serve`` in this process (on a simulated clock that walks the two
months), or one named with ``--url`` — and from its event store through the relay, Kafka and the
Faust projector to the read models, embeddings included. Then it prints every slot from the event
store (its current value, its whole history on both timelines — world time: valid from/to;
system time: recorded/retracted — and its audit trail) and asks the read models, over REST, the
bi-temporal questions an assistant would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID, uuid4

from palimpsest_client import Client

from services.command.commands import WriteResult
from services.command.memory import Palimpsest
from services.query.views import SlotView, pending_cases, slot_view

TAIPEI = timezone(timedelta(hours=8), "Asia/Taipei")
#: The longest the demo waits for the pipeline to bring the read models up to its history.
WAIT_SECONDS = 120.0
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
    """The history being written through ``client`` (``app``: the server's command side, when it
    runs in this process, for the report that reads the event store)."""

    client: Client
    clock: SimulatedClock
    tenant_id: str
    say: Callable[[str], None]
    app: Palimpsest | None = None
    slots: dict[str, UUID] = field(default_factory=dict)
    cards: dict[str, UUID] = field(default_factory=dict)
    cases: list[UUID] = field(default_factory=list)
    others: list[tuple[str, UUID]] = field(default_factory=list)
    position: int = 0

    def write(self, answer: dict[str, Any]) -> WriteResult:
        result = WriteResult.model_validate(answer)
        self.position = max(self.position, result.position or 0)
        return result

    def remember(self, **fields: Any) -> WriteResult:
        return self.write(self.client.remember(**fields))

    def state(self, label: str, value: str, **extra: Any) -> WriteResult:
        result = self.remember(kind="state", memory_type=extra.pop("memory_type", "fact"),
                               subject=extra.pop("subject", "user"), label=label, content=value,
                               **extra)
        self.slots.setdefault(label, result.aggregate_id)  # type: ignore[arg-type]
        if result.card_id:
            self.cards[label] = result.card_id
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


def run_demo(client: Client, clock: SimulatedClock, say: Callable[[str], None], tenant_id: str,
             app: Palimpsest | None = None) -> Script:
    s = Script(client, clock, tenant_id, say, app)
    say(f"Writing two months of history for tenant {tenant_id} through the REST client …")
    fibon = {"subject": "fibon", "scope": "project", "project_id": "fibon", "memory_type": "decision"}

    clock.day(0)
    s.state("address", "Taipei")
    s.state("job_title", "Backend engineer")
    s.state("skills", "Python")
    s.state("launch_date", "2026-11-01", **fibon)
    clock.day(5, 15)
    kickoff = s.other("event: fibon kickoff meeting", s.remember(
        kind="event", memory_type="event", content="Kickof meeting for fibon; scope agreed",
        occurred_at=clock.now - timedelta(hours=4), scope="project", project_id="fibon",
        tags=["fibon", "會議"]))
    clock.day(10)
    s.state("skills", "PostgreSQL")
    s.state("interests", "Hiking")
    clock.day(12)
    s.other("knowledge: JWT stateless auth", s.remember(
        kind="knowledge", memory_type="pattern", title="JWT stateless auth",
        content="Sign short-lived JWTs; keep no session state on the server.",
        tags=["JWT", "後端", "資料庫"], links=[kickoff.card_id]))
    clock.day(14)
    s.state("address", "Kyoto")
    clock.day(15)
    s.state("launch_date", "2026-11-15", **fibon)
    clock.day(18, 10, 0)
    s.state("job_title", "Staff engineer", session_id="s-42", turn_id="t-7")
    clock.day(18, 10, 1)
    s.state("job_title", "Senior engineer", session_id="s-42", turn_id="t-7")
    clock.day(20)
    doc = s.other("commitment: send design doc (due in 10 days)", s.remember(
        kind="state", memory_type="commitment", content="Send the fibon design doc to Mei",
        owner="user", due_at=clock.now + timedelta(days=10)))
    blocker = s.other("blocker: waiting on legal review", s.remember(
        kind="state", memory_type="blocker", content="Open-source licence waits on legal review",
        scope="project", project_id="fibon"))
    clock.day(31)
    s.other("commitment expires", s.write(client.move(doc.card_id, "expire")))  # type: ignore[arg-type]
    clock.day(35)
    s.state("launch_date", "2026-11-20", **fibon)
    clock.day(40)
    s.state("launch_date", "2026-11-22", **fibon)
    clock.day(45)
    s.state("address", "Kaohsiung")
    clock.day(50)
    s.other("event description corrected", s.write(client.correct(
        kickoff.card_id, "Kickoff meeting for fibon; scope agreed", "typo in the summary")))  # type: ignore[arg-type]
    s.other("blocker archived", s.write(client.move(
        blocker.card_id, "archive", note="legal approved")))  # type: ignore[arg-type]
    clock.day(53, 20)
    s.other("event: gave a talk", s.remember(
        kind="event", memory_type="event",
        content="Gave a talk on PostgreSQL indexing at the Kaohsiung Python meetup 高雄聚會",
        occurred_at=clock.now - timedelta(hours=2), tags=["talk", "PostgreSQL", "演講"]))
    clock.day(55)
    s.state("skills", "Python (expert)", item_key="python")
    clock.day(60)
    s.other("verify: job title still accurate", s.write(client.verify(
        s.cards["job_title"], aggregate_id=s.slots["job_title"])))
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
    """Every slot, card and case, read from the event store (the server's command side)."""
    if script.app is None:
        return
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


def print_read_models(script: Script, say: Callable[[str], None],
                      unembedded: Callable[[], int] | None = None) -> None:
    """Wait until the read models hold the whole history (and, where ``unembedded()`` tells how
    many cards still wait for their vector, until none does), then ask them bi-temporal
    questions over REST."""
    client = script.client
    started = time.monotonic()
    while client.facts("user", min_position=script.position)["freshness"]["stale_by"]:
        if time.monotonic() - started > WAIT_SECONDS:
            raise TimeoutError(f"the read models did not reach position {script.position} "
                               f"within {WAIT_SECONDS:.0f} s")
    while unembedded is not None and unembedded() and time.monotonic() - started < WAIT_SECONDS:
        time.sleep(0.2)
    say(f"Read models: the log up to position {script.position} projected through the relay, "
        f"Kafka and the Faust projector{', every card embedded,' if unembedded else ''} "
        f"{time.monotonic() - started:.1f} s after the last write.")
    now = script.clock.now
    day20 = START + timedelta(days=20)
    slip = START + timedelta(days=18, hours=1, seconds=30)

    def value(label: str, valid_at: datetime, known_at: datetime) -> str:
        facts = client.facts("user", valid_at=valid_at, known_at=known_at)["facts"]
        return ", ".join(f["value"] for f in facts if f["label"] == label) or "(nothing)"

    answers = [
        ("address now", value("address", now, now)),
        (f"address on {day20:%Y-%m-%d}, as we know it now", value("address", day20, now)),
        (f"address on {day20:%Y-%m-%d}, as we knew it that day", value("address", day20, day20)),
        (f"job title at {slip:%Y-%m-%d %H:%M:%S}, as believed then", value("job_title", slip, slip)),
        (f"job title at {slip:%Y-%m-%d %H:%M:%S}, as known now", value("job_title", slip, now)),
        ("skills now", value("skills", now, now)),
    ]
    for question, answer in answers:
        say(f"  {question + ':':<52} {answer}")
    ask_questions(script, say)


QUESTIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("a current question", "where does the user live?", {}),
    ("an as-of question (as we knew things on 2026-09-21)", "使用者住在哪裡？",
     {"valid_at": START + timedelta(days=20), "known_at": START + timedelta(days=20)}),
    ("a temporal question", "上週我做了什麼？", {}),
    ("the same in English", "what did I do last week?", {}),
    ("a question that meets the pending arbitration", "when is the fibon launch?",
     {"project_id": "fibon"}),
)


def ask_questions(script: Script, say: Callable[[str], None]) -> None:
    """Ask the read models the questions an assistant would, through the fused retrieval (REST)."""
    client = script.client
    say("")
    say(f"Questions, asked on {script.clock.now:%Y-%m-%d %H:%M} (`palimpsest search QUERY` "
        "against `palimpsest serve`, with this tenant's key, asks your own):")
    text, options = "", dict[str, Any]()
    for title, text, options in QUESTIONS:
        found = client.search(text, **options)
        say(f"  ▸ {title}: {text}")
        for rank, card in enumerate(found["results"][:3], start=1):
            moment = card["occurred_at"] if card["kind"] == "event" else card["valid_from"]
            when = datetime.fromisoformat(moment).astimezone(TAIPEI)
            flag = " [superseded since]" if card["superseded"] else ""
            say(f"      {rank}. {card['value']}  ({card['kind']}, {when:%Y-%m-%d}){flag}")
        for case in found["alerts"]["arbitrations"]:
            say(f"      ⚠ pending arbitration on {case['subject']}/{case['label']}: "
                f"{', '.join(case['current_values'])} (current) vs {case['proposed_value']} (proposed)")
    if text:
        say("")
        say("The prompt context for the last question (`palimpsest context`):")
        for line in client.context_text(text, **options).splitlines():
            say(f"    {line}")


def play(settings: Any, say: Callable[[str], None], url: str | None = None,
         key: str | None = None) -> None:
    """``palimpsest demo``: against the server at ``url`` (with ``key``), or one started in this
    process on the simulated clock."""
    clock = SimulatedClock()
    if url:
        with Client(url, key) as client:
            tenant = client.status()["tenant_id"]
            say(f"Writing to the server at {url} as tenant {tenant}: it records its own time, so the "
                "two months happen in seconds (the dates shown are the script's).")
            script = run_demo(client, clock, say, tenant)
            ask_questions(script, say)
        return
    _play_here(settings.model_copy(update={"time_zone": "Asia/Taipei"}), clock, say)


def _play_here(settings: Any, clock: SimulatedClock, say: Callable[[str], None]) -> None:
    import threading

    from infra.postgres import admin_database, projector_database
    from infra.processes import process_shutdown
    from projections.status import read_status
    from services.entrypoints.serve import STOP_DEADLINE, serving

    where = "PostgreSQL at PALIMPSEST_DATABASE_URL" if settings.database_url else (
        f"the embedded PostgreSQL in {settings.data_dir}/")
    say(f"Starting palimpsest serve in this process ({where}, on a simulated clock) …")
    shutdown = process_shutdown("demo", settings, deadline=STOP_DEADLINE)
    stopped = threading.Event()

    def supervise(service: Any) -> None:
        service.supervise()
        stopped.wait()  # the projector dies with the thread that started it (PR_SET_PDEATHSIG)

    try:
        with serving(settings, shutdown, port=0, mcp=False, clock=clock, local_key=False) as service:
            threading.Thread(target=supervise, args=(service,), name="supervisor", daemon=True).start()
            tenant = f"demo-{uuid4().hex[:8]}"
            assert service.background is not None
            _, key = service.background.keys.create(tenant, ("memory:admin",),
                                                    "made by palimpsest demo")
            db = projector_database(admin_database(service.settings), service.settings)
            assert service.endpoints is not None
            with Client(service.endpoints.url, key) as client:
                script = run_demo(client, clock, say, tenant, app=service.background.app)
                print_report(script, say)
                say("")
                print_read_models(script, say,
                                  unembedded=lambda: read_status(db, service.settings).embeddings_pending)
            say("")
            say(f"Tenant {tenant}'s key (to ask your own questions once `palimpsest serve` runs): {key}")
    finally:
        stopped.set()
        shutdown.done()
