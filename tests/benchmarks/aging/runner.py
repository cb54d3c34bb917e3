"""Runs the benchmark: writes the history checkpoint by checkpoint through the real commands on a
simulated clock, projects it, asks every system the checkpoint's questions, scores them.

Every write's outcome is checked against the model's; a disagreement is counted and reported,
never fatal (the rules may change while the benchmark is being run).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from domain.errors import PalimpsestError
from infra.embedders import create_embedder
from infra.postgres import Database, vector_search_available
from infra.settings import RetrievalSettings, Settings
from projections.worker import project_log
from services.command.commands import Arbitrate, Move, WriteResult
from services.command.memory import Palimpsest
from services.factory import create_app
from tests.benchmarks.aging import report
from tests.benchmarks.aging.generator import Corpus
from tests.benchmarks.aging.histories import Op
from tests.benchmarks.aging.metrics import Row, score, summarise
from tests.benchmarks.aging.questions import Budget, checkpoint_questions, snapshot
from tests.benchmarks.aging.records import CardRef, Question, RefMap, Statement
from tests.benchmarks.aging.systems import Bm25System, PalimpsestSystem, PgvectorSystem, System
from tests.support import Clock

Say = Callable[[str], None]
Questions = Callable[[Corpus, int], list[Question]]


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Writer:
    """Applies the ops in time order; keeps each result, the card ids' meaning, and where Palimpsest's
    outcome differs from the model's."""

    def __init__(self, app: Palimpsest, clock: Clock, refs: RefMap) -> None:
        self.app, self.clock, self.refs = app, clock, refs
        self.results: dict[int, WriteResult] = {}
        self.position = 0
        self.disagreements: Counter[str] = Counter()
        self.examples: list[dict[str, Any]] = []

    def run_until(self, ops: Sequence[Op], moment: Any, say: Say) -> list[Statement]:
        written, started = [], time.perf_counter()
        while self.position < len(ops) and ops[self.position].at <= moment:
            op = ops[self.position]
            self.position += 1
            self.clock.now = op.at
            self._apply(op)
            if op.statement is not None:
                written.append(op.statement)
            if self.position % 1000 == 0:
                say(f"  {self.position}/{len(ops)} ops …")
        say(f"  {len(written)} writes in {time.perf_counter() - started:.1f} s")
        return written

    def _apply(self, op: Op) -> None:
        try:
            result = self._call(op)
        except PalimpsestError as error:
            self._disagree(op, f"error: {type(error).__name__}", str(error))
            return
        if result is None:
            return
        self.results[op.ref] = result
        if result.card_id is not None:
            self.refs.setdefault(result.card_id, CardRef(op.ref, op.slot))
        if result.outcome != op.expected:
            self._disagree(op, result.outcome, result.reason)

    def _call(self, op: Op) -> WriteResult | None:
        if op.action == "remember":
            assert op.command is not None
            return self.app.remember(op.tenant, op.command)
        target = self.results.get(op.target) if op.target is not None else None
        if op.action == "resolve" and target is not None and target.card_id is not None:
            return self.app.move(op.tenant, Move(card_id=target.card_id, to="resolve"))
        if op.action == "arbitrate" and target is not None and target.case_id is not None:
            return self.app.arbitrate(op.tenant, Arbitrate(case_id=target.case_id, decision=op.decision or "",
                                                           decided_by="bench"))
        self._disagree(op, "skipped", "the write it acts on has no card or case")
        return None

    def _disagree(self, op: Op, actual: str, reason: str | None) -> None:
        kind = op.statement.kind if op.statement else op.action
        self.disagreements[f"{kind}: expected {op.expected}, got {actual}"] += 1
        if len(self.examples) < 40:
            command = op.command
            self.examples.append({"ref": op.ref, "at": op.at.isoformat(), "tenant": op.tenant,
                                  "action": op.action, "slot": list(op.slot) if op.slot else None,
                                  "expected": op.expected,
                                  "actual": actual, "reason": reason,
                                  "value": command.content if command else op.decision,
                                  "valid_from": command.valid_from.isoformat()
                                  if command and command.valid_from else None})


def bench_settings(settings: Settings, *, patient: bool = False) -> Settings:
    """The settings a user runs (breakers on, default budgets), in the corpus's time zone; with
    ``patient``, breakers lifted and budgets wide, so load never skips a route."""
    retrieval = settings.retrieval
    if patient:
        retrieval = retrieval.model_copy(update={"breaker_p95_ms": 1e9, "route_timeout_ms": 10_000,
                                                 "graph_budget_ms": 10_000})
    return settings.model_copy(update={"retrieval": retrieval, "time_zone": "Asia/Taipei"})


def make_systems(settings: Settings, admin: Database, refs: RefMap, notes: list[str], *,
                 without_lexicon: bool = False) -> list[System]:
    systems: list[System] = [PalimpsestSystem("palimpsest", settings, refs)]
    if without_lexicon:
        bare = settings.model_copy(update={"retrieval": settings.retrieval.model_copy(
            update={"lexicon": False})})
        systems.append(PalimpsestSystem("palimpsest-no-lexicon", bare, refs))
    if "decay" in RetrievalSettings.model_fields:
        unbounded = settings.model_copy(update={"retrieval": settings.retrieval.model_copy(
            update={"decay": "unbounded"})})
        systems.append(PalimpsestSystem("palimpsest-unbounded-decay", unbounded, refs))
    else:
        notes.append("palimpsest-unbounded-decay skipped: RetrievalSettings has no 'decay' field yet")
    if vector_search_available(settings):
        systems.append(PgvectorSystem(admin, create_embedder(settings)))
    else:
        notes.append("pgvector-topk skipped: this server cannot compute vector distances "
                     "(run python -m infra.pgvector_build)")
    systems.append(Bm25System())
    for note in notes:
        progress(f"note: {note}")
    return systems


def ask_all(systems: Sequence[System], questions: Sequence[Question], corpus: Corpus, day: int,
            say: Say) -> dict[str, list[Row]]:
    """Every question to every system, the systems taking turns going first."""
    moment = corpus.moment(day)
    snapshots = {t.tenant_id: snapshot(corpus, t.tenant_id, moment) for t in corpus.tenants}
    rows: dict[str, list[Row]] = {s.name: [] for s in systems}
    started = time.perf_counter()
    for n, question in enumerate(questions, 1):
        turn = n % len(systems)
        for system in [*systems[turn:], *systems[:turn]]:
            answer = system.ask(question, moment)
            marks = isinstance(system, PalimpsestSystem)
            scored = score(question, answer, snapshots[question.tenant], marks_superseded=marks)
            rows[system.name].append(scored)
        if n % 50 == 0:
            say(f"  {n}/{len(questions)} questions ({time.perf_counter() - started:.0f} s)")
    return rows


def by_split(rows: dict[str, list[Row]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each split's figures of each system: split → system → figures."""
    splits = sorted({r["split"] for found in rows.values() for r in found}, key=("dev", "test").index)
    return {split: {name: summarise([r for r in found if r["split"] == split])
                    for name, found in rows.items()} for split in splits}


def benchmark(corpus: Corpus, settings: Settings, admin: Database, *, budget: Budget | None = None,
              questions: Questions | None = None, say: Say = progress, patient: bool = False,
              without_lexicon: bool = False) -> dict[str, Any]:
    """The whole run on a bootstrapped database; returns the report (see :mod:`report`).
    ``questions``: the questions of a checkpoint, instead of :func:`checkpoint_questions`;
    ``patient``: breakers lifted (:func:`bench_settings`); ``without_lexicon``: Palimpsest asked
    again with ``lexicon=False`` beside it."""
    budget = budget or Budget()
    settings = bench_settings(settings, patient=patient)
    clock = Clock(corpus.start)
    refs: RefMap = {}
    notes: list[str] = []
    app = create_app(settings, clock=clock)
    systems = make_systems(settings, admin, refs, notes, without_lexicon=without_lexicon)
    writer = Writer(app, clock, refs)
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    asked: dict[str, list[Question]] = {}
    all_rows: dict[str, dict[str, list[Row]]] = {}
    started = time.perf_counter()
    try:
        for day in corpus.config.checkpoints:
            say(f"day {day}: writing …")
            written = writer.run_until(corpus.ops, corpus.moment(day), say)
            projected = time.perf_counter()
            applied, embedded = project_log(settings, app, admin)
            seconds = time.perf_counter() - projected
            say(f"  projected {applied} events, embedded {embedded} cards in {seconds:.1f} s")
            for system in systems:
                system.prepare(written)
            chosen = questions(corpus, day) if questions else checkpoint_questions(corpus, day, budget)
            say(f"  asking {len(chosen)} questions of {len(systems)} systems …")
            rows = ask_all(systems, chosen, corpus, day, say)
            figures[str(day)] = by_split(rows)
            asked[str(day)], all_rows[str(day)] = chosen, rows
            report.print_checkpoint(day, corpus.moment(day), figures[str(day)], chosen)
    finally:
        routes = {s.name: dict(s.routes) for s in systems if isinstance(s, PalimpsestSystem)}
        for system in systems:
            system.close()
        app.close()
    seconds = time.perf_counter() - started
    mode = "patient (breakers lifted, wide budgets)" if patient else "a user's (breakers on, default budgets)"
    return report.build(corpus, figures, asked, all_rows, writer, notes, routes, seconds, mode)
