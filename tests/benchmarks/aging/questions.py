"""The questions asked at a checkpoint, each with its ground truth from the model.

Kinds: ``current`` (a single-value slot's value now; every slot with a pending arbitration case
is asked, so the alerts can be checked), ``as_of_valid`` (valid at a past day, as known now),
``as_of_known`` (valid at a past moment as known then: late facts and later-accepted cases make
the two differ), ``temporal`` (what a person did over a relative range, resolved against the
checkpoint), ``multi`` (every item of a multi-value slot). Subjects are asked about by name, in the
first person for the tenant's own ``user``, and by pronoun in a one-person tenant.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any

from tests.benchmarks.aging import phrasings
from tests.benchmarks.aging.generator import ZONE, Corpus, Subject, Tenant
from tests.benchmarks.aging.personas import PRONOUNS
from tests.benchmarks.aging.records import Question, Snapshot, slot_key
from tests.benchmarks.aging.testsplit import RELATION_FORM
from tests.benchmarks.aging.truth import SlotTruth


@dataclass(frozen=True)
class Budget:
    """At most this many questions of each kind per checkpoint (sampled with the seed)."""

    current: int = 160
    as_of_valid: int = 50
    as_of_known: int = 50
    temporal: int = 60
    multi: int = 60


QUICK = Budget(current=20, as_of_valid=6, as_of_known=6, temporal=8, multi=8)
_GENERIC_WORDS = {"date", "the", "of", "to", "go"}


def names_label(label: str, text: str) -> bool:
    """Whether ``text`` contains a word of ``label`` (English words, plurals too; Chinese: any two
    consecutive characters of it), ``date`` / 日期 aside."""
    lowered = text.casefold()
    words = [w for w in re.findall(r"[a-z]+", label.casefold()) if w not in _GENERIC_WORDS]
    if any(re.search(rf"\b{w}s?\b", lowered) for w in words):
        return True
    han = re.sub(r"[^\u4e00-\u9fff]", "", label)
    pairs = {han[i:i + 2] for i in range(len(han) - 1)} - {"日期"}
    return any(pair in text for pair in pairs) or (len(han) == 1 and han in text)


def forms(subject: Subject, tenant: Tenant) -> dict[str, str]:
    """The placeholders naming ``subject``: first person, a pronoun (one-person tenant), or a name."""
    if subject.user:
        who = {"en": "I", "zh-Hant": "我", "zh-Hans": "我"}[subject.lang]
        return {"who": who, "whose": "my", "whom": "me", "does": "do", "is": "am", "has": "have"}
    if subject.relation:
        who = RELATION_FORM[subject.lang].format(name=subject.name)
        whose, whom = (f"{who}'s", who) if subject.lang == "en" else (who, who)
    elif not subject.project and len(tenant.persons) == 1 and subject.gender:
        who = PRONOUNS[subject.lang][subject.gender]
        whose = {"she": "her", "he": "his"}.get(who, who)
        whom = {"she": "her", "he": "him"}.get(who, who)
    else:
        who, whose, whom = subject.name, f"{subject.name}'s", subject.name
    return {"who": who, "whose": whose, "whom": whom, "does": "does", "is": "is", "has": "has"}


def render(template: str, subject: Subject, tenant: Tenant, label: str, **extra: str) -> str:
    words = label.replace("_", " ") if subject.lang == "en" else label
    fills = {"old": "", "date": "", "expr": "", **extra}
    return template.format(**forms(subject, tenant), label=words, **fills)


def say_date(moment: datetime, lang: str) -> str:
    local = moment.astimezone(ZONE)
    if lang == "en":
        return f"{local:%B} {local.day}, {local.year}"
    return f"{local.year}年{local.month}月{local.day}日"


def expression_range(key: str, now: datetime) -> tuple[datetime, datetime]:
    """The half-open local range a relative expression names, asked at ``now`` (weeks from Monday)."""
    today = now.astimezone(ZONE).date()
    monday = today - timedelta(days=today.weekday())
    first = today.replace(day=1)
    previous = (first - timedelta(days=1)).replace(day=1)
    days = {"today": (today, today + timedelta(days=1)),
            "yesterday": (today - timedelta(days=1), today),
            "2_days_ago": (today - timedelta(days=2), today - timedelta(days=1)),
            "3_days_ago": (today - timedelta(days=3), today - timedelta(days=2)),
            "this_week": (monday, monday + timedelta(days=7)),
            "last_week": (monday - timedelta(days=7), monday),
            "last_month": (previous, first)}[key]
    return tuple(datetime.combine(d, time(), ZONE) for d in days)  # type: ignore[return-value]


@dataclass
class Asker:
    corpus: Corpus
    day: int
    rng: random.Random
    split: str = "dev"

    @property
    def now(self) -> datetime:
        return self.corpus.moment(self.day)

    def subject(self, tenant_id: str, name: str) -> tuple[Tenant, Subject]:
        tenant = self.corpus.tenant(tenant_id)
        return tenant, next(s for s in tenant.subjects if s.name == name)

    def question(self, kind: str, truth: SlotTruth, template: str, named: bool, n: int,
                 fills: dict[str, str] | None = None, **extra: Any) -> Question:
        """A question about ``truth``'s slot; ``fills``: the template's ``{old}`` / ``{date}``."""
        tenant, subject = self.subject(truth.tenant, truth.subject)
        text = render(template, subject, tenant, truth.label, **(fills or {}))
        qid = f"d{self.day}-{kind}-{n}" if self.split == "dev" else f"d{self.day}-{self.split}-{kind}-{n}"
        return Question(qid=qid, checkpoint=self.day, tenant=truth.tenant, kind=kind, split=self.split,
                        lang=truth.lang, text=text, template=template,
                        names_label=named or names_label(truth.label, text), slot_kind=truth.kind,
                        slot=slot_key(truth.subject, truth.label), **extra)

    def slots(self, single: bool) -> list[SlotTruth]:
        return [s for s in self.corpus.slots.values() if s.single == single
                and self.corpus.tenant(s.tenant).split == self.split and s.values_at(self.now, self.now)]


def checkpoint_questions(corpus: Corpus, day: int, budget: Budget) -> list[Question]:
    """The dev split's questions at a checkpoint, then the test split's (:mod:`testcorpus`)."""
    from tests.benchmarks.aging import testcorpus  # it builds on this module's askers

    return [*dev_questions(corpus, day, budget), *testcorpus.questions(corpus, day, budget)]


def dev_questions(corpus: Corpus, day: int, budget: Budget) -> list[Question]:
    asker = Asker(corpus, day, random.Random(f"{corpus.config.seed}-questions-{day}"))
    found = [*_current(asker, budget.current), *_as_of_valid(asker, budget.as_of_valid),
             *_as_of_known(asker, budget.as_of_known), *_temporal(asker, budget.temporal),
             *_multi(asker, budget.multi)]
    asker.rng.shuffle(found)
    return found


def pick(asker: Asker, table: phrasings.Phrasings, old: str | None = None,
         first_person: bool = False) -> tuple[str, bool]:
    """A template, naming the label or not at even odds; one with ``{old}`` only when there is an
    old value, none where "I" would ask how to reach "me"."""
    named, plain = table
    plain = tuple(t for t in plain if (old or "{old}" not in t)
                  and not (first_person and "{whom}" in t and "I " in t))
    use_named = not plain or (bool(named) and asker.rng.random() < 0.5)
    return asker.rng.choice(named if use_named else plain), use_named


def _previous(truth: SlotTruth, now: datetime, current: str) -> str | None:
    older = [c.value for c in truth.history(now) if c.value != current and c.valid_from <= now]
    return older[-1] if older else None


def current_slots(asker: Asker, budget: int) -> list[SlotTruth]:
    """Up to ``budget`` single-value slots to ask the current value of: those in conflict now
    first, then a sample of the rest."""
    now, slots = asker.now, asker.slots(single=True)
    conflicted = [s for s in slots if s.pending(now)][:budget]
    rest = [s for s in slots if not s.pending(now)]
    return conflicted + asker.rng.sample(rest, min(len(rest), budget - len(conflicted)))


def _current(asker: Asker, budget: int) -> Iterator[Question]:
    now = asker.now
    for n, truth in enumerate(current_slots(asker, budget)):
        value = truth.current(now)
        assert value is not None
        old = _previous(truth, now, value)
        table = phrasings.current(truth.kind, truth.lang)
        template, named = pick(asker, table, old, first_person=truth.subject == "user")
        yield asker.question("current", truth, template, named, n, expected=(value,),
                             conflict=bool(truth.pending(now)), fills={"old": old or ""})


def _as_of_valid(asker: Asker, budget: int) -> Iterator[Question]:
    now, rng, n = asker.now, asker.rng, 0
    slots = [s for s in asker.slots(single=True) if len(s.history(now)) > 1]
    for truth in rng.sample(slots, len(slots)):
        if n >= budget:
            return
        cards = truth.history(now)
        closed = [c for c in cards if c.valid_to(now) is not None]
        card = rng.choice(closed) if closed and rng.random() < 0.7 else cards[-1]
        end = card.valid_to(now) or now
        first = (card.valid_from.astimezone(ZONE) + timedelta(days=1)).date()
        last = (end.astimezone(ZONE) - timedelta(days=1)).date()
        if first > last:
            continue
        day = first + timedelta(days=rng.randint(0, (last - first).days))
        moment = datetime.combine(day, time(12), ZONE)
        held = {truth.value_at(moment.replace(hour=0), now), truth.value_at(moment.replace(hour=23), now)}
        if held != {card.value}:
            continue
        template, named = pick(asker, phrasings.as_of(phrasings.AS_OF_VALID, truth.kind, truth.lang))
        yield asker.question("as_of_valid", truth, template, named, n, expected=(card.value,),
                             valid_at=moment, fills={"date": say_date(moment, truth.lang)})
        n += 1


def _known_moments(truth: SlotTruth, now: datetime, rng: random.Random, start: datetime) -> list[datetime]:
    """Moments where what was known then differs from what is known now (a fact learned late, a
    case accepted later), then one at random."""
    moments = [c.valid_from + (c.recorded_at - c.valid_from) / 2 for c in truth.history(now)
               if c.recorded_at <= now and c.recorded_at - c.valid_from >= timedelta(days=2)]
    moments += [case.opened_at + (case.decided_at - case.opened_at) / 2 for case in truth.cases
                if case.decision == "accept_new" and case.decided_at and case.decided_at <= now]
    if now - start > timedelta(days=7):
        moments.append(start + (now - timedelta(days=1) - start) * rng.random())
    return moments


def _as_of_known(asker: Asker, budget: int) -> Iterator[Question]:
    now, rng, n = asker.now, asker.rng, 0
    slots = asker.slots(single=True)
    for truth in rng.sample(slots, len(slots)):
        for moment in _known_moments(truth, now, rng, asker.corpus.start)[:1 if n >= budget // 2 else 2]:
            value = truth.value_at(moment, moment)
            if n >= budget or value is None:
                continue
            template, named = pick(asker, phrasings.as_of(phrasings.AS_OF_KNOWN, truth.kind, truth.lang))
            yield asker.question("as_of_known", truth, template, named, n, expected=(value,), valid_at=moment,
                                 known_at=moment, fills={"date": say_date(moment, truth.lang)})
            n += 1


def _temporal(asker: Asker, budget: int) -> Iterator[Question]:
    now, rng, n = asker.now, asker.rng, 0
    persons = [(t, s) for t in asker.corpus.tenants if t.split == asker.split for s in t.persons]
    rounds = [[(t, s, key) for t, s in rng.sample(persons, len(persons))] for key in phrasings.EXPRESSIONS]
    for tenant, subject, key in (pair for turn in zip(*rounds, strict=True) for pair in turn):
        start, end = expression_range(key, now)
        refs = tuple(e.ref for e in asker.corpus.events if e.tenant == tenant.tenant_id
                     and e.subject == subject.name and start <= e.occurred_at < end and e.recorded_at <= now)
        if n >= budget or not refs:
            continue
        template = rng.choice(phrasings.TEMPORAL[subject.lang])
        text = render(template, subject, tenant, "", expr=phrasings.EXPRESSIONS[key][subject.lang])
        yield Question(qid=f"d{asker.day}-temporal-{n}", checkpoint=asker.day, tenant=tenant.tenant_id,
                       kind="temporal", lang=subject.lang, text=text, template=template, names_label=False,
                       slot_kind=key, refs=refs)
        n += 1


def _multi(asker: Asker, budget: int) -> Iterator[Question]:
    now, slots = asker.now, asker.slots(single=False)
    for n, truth in enumerate(asker.rng.sample(slots, min(budget, len(slots)))):
        values = tuple(truth.values_at(now, now))
        template, named = pick(asker, phrasings.current(truth.kind, truth.lang))
        yield asker.question("multi", truth, template, named, n, expected=values, top_n=max(5, len(values)))


def snapshot(corpus: Corpus, tenant_id: str, at: datetime) -> Snapshot:
    """What holds in ``tenant_id`` at ``at`` (known then): for scoring alerts and leakage."""
    found = Snapshot()
    for (tenant, key), truth in corpus.slots.items():
        if tenant != tenant_id:
            continue
        if truth.pending(at):
            found.conflicted.add(key)
        value = truth.current(at) if truth.single else None
        if value is not None:
            found.current[key] = value
            if truth.aging(at):
                found.aging.add(key)
    return found
