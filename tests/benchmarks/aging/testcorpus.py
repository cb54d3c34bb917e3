"""The test split's tenants and questions, drawn from :mod:`testsplit` the way the dev split is
drawn from :mod:`personas` and :mod:`phrasings`: a household in Traditional Chinese and a circle of
friends in English, each with its user and the people around them, a year of changing values, the
same kind of events and notes for noise; then current-value and multi-value questions.

Its tenants are drawn after the dev split's, from their own seed, so the dev split stays the same
write for write and question for question.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from tests.benchmarks.aging import histories, testsplit
from tests.benchmarks.aging.generator import (
    Config,
    Corpus,
    Subject,
    Tenant,
    events,
    labelled,
    notes,
)
from tests.benchmarks.aging.histories import Calendar, Draw
from tests.benchmarks.aging.personas import SlotKind
from tests.benchmarks.aging.questions import Asker, Budget, current_slots, pick
from tests.benchmarks.aging.records import Question, SlotKey, slot_key
from tests.benchmarks.aging.truth import SlotTruth

SPLIT = "test"


def add_tenants(draw: Draw, config: Config, calendar: Calendar,
                slots: dict[tuple[str, SlotKey], SlotTruth]) -> list[Tenant]:
    """Draws the test tenants' histories into ``draw`` and their slots into ``slots``."""
    rng = random.Random(f"{config.seed}-test")
    tenants = []
    for i in range(config.test_tenants):
        profile = testsplit.PROFILES[i % len(testsplit.PROFILES)]
        tenant = Tenant(f"{config.prefix}-test-{profile.name}-{i}", profile, split=SPLIT)
        tenant.subjects = _people(tenant, config.test_persons, rng)
        dialect = {name: rng.randrange(8) for name in testsplit.KINDS}
        for subject in tenant.subjects:
            for truth, kind in _slots(tenant, subject, dialect, rng):
                slots[(tenant.tenant_id, slot_key(truth.subject, truth.label))] = truth
                values = kind.values[subject.lang]
                if truth.single:
                    pick = _picker(values, rng)
                    histories.single_history(draw, truth, pick, rng, calendar, kind.mean_gap,
                                             flip=rng.random() < 0.15, rewrite=rng.random() < 0.05)
                else:
                    histories.multi_history(draw, truth, values, rng, calendar)
            events(draw, tenant, subject, rng, calendar)
        notes(draw, tenant, rng, calendar)
        tenants.append(tenant)
    return tenants


def _people(tenant: Tenant, count: int, rng: random.Random) -> list[Subject]:
    lang = tenant.profile.lang
    others = list(testsplit.PEOPLE[lang])
    rng.shuffle(others)
    people = [Subject(tenant.tenant_id, "user", lang)]
    people += [Subject(tenant.tenant_id, name, lang, gender, relation=relation)
               for name, gender, relation in others[:max(count - 1, 0)]]
    return people


def _slots(tenant: Tenant, subject: Subject, dialect: dict[str, int],
           rng: random.Random) -> list[tuple[SlotTruth, SlotKind]]:
    kinds = [*rng.sample(testsplit.SINGLE_KINDS, 6), *rng.sample(testsplit.MULTI_KINDS, 2)]
    return labelled(tenant, subject, kinds, dialect, rng)


def _picker(pool: tuple[str, ...], rng: random.Random) -> histories.Picker:
    return lambda current: rng.choice([v for v in pool if v != current])


def questions(corpus: Corpus, day: int, budget: Budget) -> list[Question]:
    """The test split's questions at a checkpoint: current values, then multi-value slots."""
    asker = Asker(corpus, day, random.Random(f"{corpus.config.seed}-test-questions-{day}"), split=SPLIT)
    found = [*_current(asker, budget.current), *_multi(asker, budget.multi)]
    asker.rng.shuffle(found)
    return found


def _current(asker: Asker, budget: int) -> Iterator[Question]:
    now = asker.now
    for n, truth in enumerate(current_slots(asker, budget)):
        value = truth.current(now)
        assert value is not None
        table = (testsplit.NAMED[truth.lang], testsplit.PARAPHRASES[truth.kind][truth.lang])
        template, named = pick(asker, table, first_person=truth.subject == "user")
        yield asker.question("current", truth, template, named, n, expected=(value,),
                             conflict=bool(truth.pending(now)))


def _multi(asker: Asker, budget: int) -> Iterator[Question]:
    now, slots = asker.now, asker.slots(single=False)
    for n, truth in enumerate(asker.rng.sample(slots, min(budget, len(slots)))):
        values = tuple(truth.values_at(now, now))
        table = (testsplit.NAMED_MULTI[truth.lang], testsplit.PARAPHRASES[truth.kind][truth.lang])
        template, named = pick(asker, table, first_person=truth.subject == "user")
        yield asker.question("multi", truth, template, named, n, expected=values, top_n=max(5, len(values)))
