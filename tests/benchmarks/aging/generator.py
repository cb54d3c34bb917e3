"""A seeded, multi-tenant, trilingual year of history, and its ground truth.

Tenants follow :data:`personas.PROFILES` (a Traditional-Chinese family and an English team, each
with its own user as the subject ``user``; a Simplified-Chinese studio whose people are named; a
one-person care tenant, asked about by pronoun); persons and projects are shared out among them,
so facts of other people in the same tenant interfere. Every tenant names its slots its own way (a
label per slot kind, some subjects another one). The truth is the model the histories were drawn
against (:mod:`truth`), never anything read back from Palimpsest.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from services.command.commands import Remember
from tests.benchmarks.aging import histories, personas
from tests.benchmarks.aging.histories import Calendar, Draw, Op, Picker
from tests.benchmarks.aging.material import (
    COMMITMENTS,
    EVENTS,
    FILLERS,
    FIRST_PERSON,
    PROJECT_EVENTS,
    TIPS,
    TOPICS,
)
from tests.benchmarks.aging.records import SlotKey, slot_key
from tests.benchmarks.aging.truth import EventTruth, SlotTruth

ZONE = ZoneInfo("Asia/Taipei")
#: A Monday; the simulated year ends before the real clock of any machine running this.
START = datetime(2025, 9, 1, tzinfo=ZONE)
CHECKPOINTS = (0, 30, 60, 120, 240, 365)


@dataclass(frozen=True)
class Config:
    seed: int = 7
    tenants: int = 4
    persons: int = 44
    projects: int = 8
    days: int = 365
    checkpoints: tuple[int, ...] = CHECKPOINTS
    #: Prefix of the tenant ids (a run's own, so a kept data folder can be reused).
    prefix: str = "aging"
    #: The test split's tenants (:mod:`testsplit`) and the people in each, its user included.
    test_tenants: int = 2
    test_persons: int = 7


@dataclass(frozen=True)
class Subject:
    tenant: str
    name: str
    lang: str
    gender: str | None = None
    project: bool = False
    #: Named by a relation ("sister", 房東): asked about as "my sister".
    relation: bool = False

    @property
    def user(self) -> bool:
        return self.name == "user"


@dataclass
class Tenant:
    tenant_id: str
    profile: personas.Profile
    subjects: list[Subject] = field(default_factory=list)
    #: ``dev`` (the material the retrieval code was written against) or ``test`` (:mod:`testsplit`).
    split: str = "dev"

    @property
    def persons(self) -> list[Subject]:
        return [s for s in self.subjects if not s.project]


@dataclass
class Corpus:
    config: Config
    tenants: list[Tenant]
    ops: list[Op]
    slots: dict[tuple[str, SlotKey], SlotTruth]
    events: list[EventTruth]
    start: datetime = START

    def moment(self, day: int) -> datetime:
        """A checkpoint's moment: 21:00 on its day, after the day's conversations."""
        return self.start + timedelta(days=day, hours=21)

    def tenant(self, tenant_id: str) -> Tenant:
        return next(t for t in self.tenants if t.tenant_id == tenant_id)

    def size(self) -> dict[str, int]:
        writes = [op for op in self.ops if op.action == "remember"]
        kinds: dict[str, int] = {}
        for op in writes:
            assert op.statement is not None
            kinds[op.statement.kind] = kinds.get(op.statement.kind, 0) + 1
        state_cards = sum(len(s.cards) for s in self.slots.values())
        others = sum(count for kind, count in kinds.items() if kind != "state")
        return {"ops": len(self.ops), "writes": len(writes), "cards": state_cards + others,
                "subjects": sum(len(t.subjects) for t in self.tenants), "slots": len(self.slots),
                "state_cards": state_cards,
                "arbitration_cases": sum(len(s.cases) for s in self.slots.values()),
                "decisions": sum(op.action == "arbitrate" for op in self.ops),
                "resolutions": sum(op.action == "resolve" for op in self.ops),
                **{f"writes_{kind}": count for kind, count in sorted(kinds.items())}}


def generate(config: Config) -> Corpus:
    rng = random.Random(config.seed)
    calendar = Calendar(START, config.days)
    tenants = _tenants(config, rng)
    draw, slots = Draw(), {}
    for tenant in tenants:
        dialect = {kind: rng.randrange(8) for kind in personas.KINDS}
        for subject in tenant.subjects:
            for truth, kind in _slots(tenant, subject, dialect, rng):
                slots[(tenant.tenant_id, slot_key(truth.subject, truth.label))] = truth
                _history(draw, truth, kind, subject, rng, calendar)
            events(draw, tenant, subject, rng, calendar)
        notes(draw, tenant, rng, calendar)
        _commitments(draw, tenant, rng, calendar)
    from tests.benchmarks.aging import testcorpus  # it builds on this module's tenants

    tested = testcorpus.add_tenants(draw, config, calendar, slots)  # its own seed: dev stays as it was
    ops = sorted(draw.ops, key=lambda op: (op.at, op.ref))
    return Corpus(config, [*tenants, *tested], ops, slots, draw.events)


# ---- who ----------------------------------------------------------------------------------------


def _tenants(config: Config, rng: random.Random) -> list[Tenant]:
    profiles = [personas.PROFILES[i] if i < len(personas.PROFILES) else personas.PROFILES[i % 3]
                for i in range(config.tenants)]
    solo = [i for i, p in enumerate(profiles) if p.solo and config.persons > config.tenants]
    shared = [i for i in range(config.tenants) if i not in solo] or list(range(config.tenants))
    counts = [1 if i in solo else 0 for i in range(config.tenants)]
    for n in range(config.persons - len(solo)):
        counts[shared[n % len(shared)]] += 1
    tenants = [Tenant(f"{config.prefix}-{p.name}-{i}", p) for i, p in enumerate(profiles)]
    for tenant, count in zip(tenants, counts, strict=True):
        tenant.subjects = _persons(tenant, count, rng)
    owners = [i for i in shared if profiles[i].name in ("team", "studio")] or shared
    for n in range(config.projects):
        tenant = tenants[owners[n % len(owners)]]
        names = personas.PROJECT_NAMES[tenant.profile.lang]
        taken = {s.name for s in tenant.subjects}
        name = next((x for x in names if x not in taken), f"{names[0]}-{n}")
        tenant.subjects.append(Subject(tenant.tenant_id, name, tenant.profile.lang, project=True))
    return tenants


def _persons(tenant: Tenant, count: int, rng: random.Random) -> list[Subject]:
    langs, weights = zip(*tenant.profile.mix, strict=True)
    names = {lang: _names(lang, rng) for lang in set(langs)}
    persons = []
    for i in range(count):
        lang = tenant.profile.lang if i == 0 else rng.choices(langs, weights)[0]
        name, gender = names[lang].pop()
        persons.append(Subject(tenant.tenant_id, "user" if i == 0 and tenant.profile.has_user else name,
                               lang, gender))
    return persons


def _names(lang: str, rng: random.Random) -> list[tuple[str, str]]:
    """Names to pop, the plain ones last: English first names before full names."""
    if lang != "en":
        names = [(s + given, g) for s in personas.ZH_SURNAMES[lang] for given, g in personas.ZH_GIVEN[lang]]
        rng.shuffle(names)
        return names
    first, full = list(personas.EN_NAMES), [(f"{n} {s}", g) for n, g in personas.EN_NAMES
                                            for s in personas.EN_SURNAMES]
    rng.shuffle(first)
    rng.shuffle(full)
    return full + first


# ---- what ---------------------------------------------------------------------------------------


def _slots(tenant: Tenant, subject: Subject, dialect: dict[str, int],
           rng: random.Random) -> list[tuple[SlotTruth, personas.SlotKind]]:
    if subject.project:
        kinds = list(personas.PROJECT_KINDS)
    else:
        singles = list(personas.SINGLE_KINDS)
        kinds = [*singles[:2], *rng.sample(singles[2:], 4), *rng.sample(personas.MULTI_KINDS, 3)]
    return labelled(tenant, subject, kinds, dialect, rng)


def labelled(tenant: Tenant, subject: Subject, kinds: list[personas.SlotKind],
             dialect: dict[str, int], rng: random.Random) -> list[tuple[SlotTruth, personas.SlotKind]]:
    """Each kind's slot under the tenant's usual label for it (its dialect), now and then another."""
    chosen = []
    for kind in kinds:
        labels = kind.labels[subject.lang]
        pick = dialect[kind.name] if rng.random() < 0.75 else rng.randrange(8)
        truth = SlotTruth(tenant.tenant_id, subject.name, labels[pick % len(labels)], kind.name,
                          subject.lang, kind.cardinality, kind.memory_type)
        chosen.append((truth, kind))
    return chosen


def _history(draw: Draw, truth: SlotTruth, kind: personas.SlotKind, subject: Subject, rng: random.Random,
             calendar: Calendar) -> None:
    if not truth.single:
        histories.multi_history(draw, truth, kind.values[subject.lang], rng, calendar)
        return
    flip = rng.random() < (0.6 if kind.name == "launch" else 0.15)
    histories.single_history(draw, truth, _picker(kind, subject.lang, rng), rng, calendar, kind.mean_gap,
                             flip=flip, rewrite=rng.random() < 0.05)


def _picker(kind: personas.SlotKind, lang: str, rng: random.Random) -> Picker:
    """Draws a slot's next value, different from ``current``."""
    if kind.name == "phone":
        return lambda current: _phone(lang, rng)
    if kind.name == "launch":
        def launch(current: str | None) -> str:
            if current is None:
                return (START.date() + timedelta(days=rng.randint(90, 240))).isoformat()
            shift = rng.randint(14, 60) if rng.random() < 0.8 else -rng.randint(7, 20)
            return (date.fromisoformat(current) + timedelta(days=shift)).isoformat()
        return launch
    pool = kind.values[lang]
    return lambda current: rng.choice([v for v in pool if v != current])


def _phone(lang: str, rng: random.Random) -> str:
    if lang == "en":
        return f"+1 415-555-{rng.randint(1000, 9999)}"
    if lang == "zh-Hant":
        return f"09{rng.randint(10, 99)}-{rng.randint(100, 999)}-{rng.randint(100, 999)}"
    return f"13{rng.randint(0, 9)}{rng.randint(1000, 9999)}{rng.randint(1000, 9999)}"


# ---- events, notes, commitments -----------------------------------------------------------------


def events(draw: Draw, tenant: Tenant, subject: Subject, rng: random.Random, calendar: Calendar) -> None:
    """A person's trips, meetings, visits and purchases about every nine days (a project's meetings
    every three weeks), some told a day or two after they happened."""
    lang, mean = subject.lang, 20.0 if subject.project else 9.0
    who = FIRST_PERSON[lang] if subject.user else subject.name
    places = personas.KINDS["residence"].values[lang]
    day = rng.uniform(0, 6)
    while day <= calendar.days:
        at = calendar.at(day, rng)
        late = rng.random() < 0.35
        back = timedelta(days=rng.uniform(1, 2)) if late else timedelta(hours=rng.uniform(0, 3))
        tags: tuple[str, ...] = ()
        if subject.project:
            description = rng.choice(PROJECT_EVENTS[lang]).format(who=who)
        else:
            template, tags = rng.choice(EVENTS[lang])
            fill = {name: rng.choice(pool) for name, pool in FILLERS[lang].items()}
            description = template.format(who=who, place=rng.choice(places), **fill)
        draw.event(tenant.tenant_id, subject.name, description, at - back, at, tags)
        day += max(1.0, rng.expovariate(1 / mean))


def notes(draw: Draw, tenant: Tenant, rng: random.Random, calendar: Calendar) -> None:
    """Knowledge cards on the tenant's recurring topics, every couple of weeks."""
    lang, day = tenant.profile.lang, rng.uniform(0, 10)
    while day <= calendar.days:
        title, tags = rng.choice(TOPICS[lang])
        body = f"{title}: {rng.choice(TIPS[lang])}"
        command = Remember(kind="knowledge", memory_type=rng.choice(("note", "pattern")), title=title,
                           content=body, tags=tags)
        at = calendar.at(day, rng)
        draw.other(tenant.tenant_id, "knowledge", command, at, f"{title}\n{body}", "learned")
        day += max(2.0, rng.expovariate(1 / 15))


def _commitments(draw: Draw, tenant: Tenant, rng: random.Random, calendar: Calendar) -> None:
    """Promises with due dates; most are resolved in time, the rest run past due."""
    persons = [s for s in tenant.persons if not s.user]
    if not persons:
        return
    lang, day = tenant.profile.lang, rng.uniform(0, 10)
    places = personas.KINDS["residence"].values[lang]
    while day <= calendar.days:
        at, whom = calendar.at(day, rng), rng.choice(persons)
        owner = "user" if tenant.profile.has_user else rng.choice(persons).name
        text = rng.choice(COMMITMENTS[lang]).format(whom=whom.name, place=rng.choice(places))
        due = at + timedelta(days=rng.randint(3, 21))
        command = Remember(kind="state", memory_type="commitment", content=text, owner=owner, due_at=due)
        ref = draw.other(tenant.tenant_id, "commitment", command, at, text, "open")
        if rng.random() < 0.6:
            draw.resolve(tenant.tenant_id, ref, at + (due - at) * rng.uniform(0.2, 0.9))
        day += max(2.0, rng.expovariate(1 / 14))
