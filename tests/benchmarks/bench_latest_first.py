"""Latest-first over raw conversation turns, with extraction off (``make bench-latest-first``).

    .venv/bin/python -m tests.benchmarks.bench_latest_first [--json] [--data-dir PATH] [--keep]

Each conversation of ``tests/benchmarks/latest_first/{dev,test}.json`` (English and Chinese,
3–5 turns, a fact that changes once or twice between small talk) is ingested through
``Palimpsest.ingest_turn`` into a tenant of its own, each turn said ``days_ago`` days before
``asked_at``, and projected on a throwaway embedded PostgreSQL. Then its question about now is
asked at ``asked_at``, and, where it has one, its question about the past.

Figures per set, for the current settings (``PALIMPSEST_RETRIEVAL__*`` from the environment) and,
in the same run on the same data, for the baseline with the present-question rule off
(``conversation_recency=False``):

- latest-first@1: the share of questions about now whose first conversation turn is the latest
  statement of the fact (the last of ``statements``);
- MRR: the mean reciprocal rank of the latest statement among the conversation turns returned
  (0 when it is not among the first ``TOP``);
- other first: the share of questions about now whose first turn is no statement of the fact at
  all (small talk, an assistant's reply): what a recency prior must not do;
- past, earliest first: the share of questions about the past (April, 以前) whose first turn is
  the first statement (the rule leaves them alone, so both systems agree).

The numbers of the rule were chosen on ``dev`` alone; ``test`` was written with it and is only
measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from infra.postgres import admin_database, bootstrap
from infra.settings import Settings
from projections.worker import project_log
from services.command.commands import IngestTurn
from services.factory import create_app, create_queries
from services.query.queries import Queries
from tests.benchmarks.folders import bench_folder
from tests.support import Clock

CORPUS = Path(__file__).parent / "latest_first"
SETS = ("dev", "test")
#: Cards asked for per question: the latest statement's rank is read among them.
TOP = 10
BASELINE = {"conversation_recency": False}


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: list[dict[str, Any]]
    statements: list[int]
    question: str
    past_question: str | None


@dataclass
class Asked:
    """Where a conversation's statements came among the turns a question returned."""

    conversation: str
    question: str
    ranks: dict[int, int]  # turn index → 1-based rank among the conversation's turns returned
    first: str | None


def load(name: str) -> tuple[datetime, list[Conversation]]:
    data = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    return datetime.fromisoformat(data["asked_at"]), [
        Conversation(c["id"], c["turns"], c["statements"], c["question"], c.get("past_question"))
        for c in data["conversations"]]


def write(app: Any, clock: Clock, conversation: Conversation, asked_at: datetime) -> list[UUID]:
    """The conversation's turns, in the order said; their event cards' ids."""
    tenant, ids = f"lf-{conversation.id}", []
    for index, turn in enumerate(conversation.turns):
        said = asked_at - timedelta(days=turn["days_ago"], minutes=len(conversation.turns) - index)
        clock.now = said
        result = app.ingest_turn(tenant, IngestTurn(
            session_id=f"{conversation.id}-{turn['days_ago']}", turn_id=str(index), role=turn["role"],
            text=turn["text"], said_at=said, timezone="UTC"))
        ids.append(result.event_card_id)
    return ids


def ask(queries: Queries, conversation: Conversation, ids: list[UUID], text: str,
        asked_at: datetime) -> Asked:
    query = queries.query(text, now=asked_at, top_n=TOP)
    found = [card.card_id for card in queries.search(f"lf-{conversation.id}", query).results]
    turns = [card_id for card_id in found if card_id in ids]
    ranks = {ids.index(card_id): rank for rank, card_id in enumerate(turns, start=1)}
    first = conversation.turns[ids.index(turns[0])]["text"] if turns else None
    return Asked(conversation.id, text, ranks, first)


def figures(now: Sequence[Asked], past: Sequence[Asked], statements: dict[str, list[int]],
            ) -> dict[str, Any]:
    latest = [a.ranks.get(statements[a.conversation][-1]) for a in now]
    others = [bool(a.ranks) and min(a.ranks, key=a.ranks.__getitem__) not in statements[a.conversation]
              for a in now]
    past_hits = [a.ranks.get(statements[a.conversation][0]) == 1 for a in past]
    return {"questions": len(now), "latest_first_at_1": _share([r == 1 for r in latest]),
            "mrr": round(sum(1 / r for r in latest if r) / len(now), 3),
            "other_first": _share(others), "past_questions": len(past),
            "past_earliest_first_at_1": _share(past_hits) if past else None,
            "misses": [_miss(a) for a, r in zip(now, latest, strict=True) if r != 1]
            + [_miss(a) for a, hit in zip(past, past_hits, strict=True) if not hit]}


def _share(flags: Sequence[bool]) -> float:
    return round(sum(flags) / len(flags), 3)


def _miss(asked: Asked) -> dict[str, Any]:
    return {"conversation": asked.conversation, "question": asked.question, "first": asked.first}


def run_set(name: str, app: Any, clock: Clock, systems: dict[str, Queries],
            settings: Settings, admin: Any) -> dict[str, dict[str, Any]]:
    asked_at, conversations = load(name)
    ids = {c.id: write(app, clock, c, asked_at) for c in conversations}
    project_log(settings, app, admin)
    statements = {c.id: c.statements for c in conversations}
    result = {}
    for system, queries in systems.items():
        now = [ask(queries, c, ids[c.id], c.question, asked_at) for c in conversations]
        past = [ask(queries, c, ids[c.id], c.past_question, asked_at)
                for c in conversations if c.past_question]
        result[system] = figures(now, past, statements)
    return result


def bench(settings: Settings) -> dict[str, Any]:
    admin = admin_database(settings)
    bootstrap(admin, settings)
    settings = settings.model_copy(update={"auto_bootstrap": False})
    lifted = settings.retrieval.model_copy(update={
        "breaker_p95_ms": 1e9, "route_timeout_ms": 10_000, "graph_budget_ms": 10_000})
    current = settings.model_copy(update={"retrieval": lifted})
    baseline = settings.model_copy(update={"retrieval": lifted.model_copy(update=BASELINE)})
    clock = Clock()
    app = create_app(current, clock=clock)
    systems = {"palimpsest": create_queries(current, clock),
               "rule off": create_queries(baseline, clock)}
    try:
        sets = {name: run_set(name, app, clock, systems, current, admin) for name in SETS}
    finally:
        for queries in systems.values():
            queries.close()
        app.close()
    knobs = {k: v for k, v in lifted.model_dump().items()
             if k.startswith("decay") or "conversation" in k}
    return {"settings": knobs, "sets": sets}


def report(result: dict[str, Any]) -> None:
    print("settings: " + ", ".join(f"{k}={v}" for k, v in result["settings"].items()))
    print(f"{'set':5} {'system':20} {'n':>3} {'latest-first@1':>15} {'MRR':>6} {'other first':>12} "
          f"{'past: earliest first':>21}")
    for name, systems in result["sets"].items():
        for system, f in systems.items():
            past = "–" if f["past_earliest_first_at_1"] is None else \
                f"{f['past_earliest_first_at_1']:.2f} ({f['past_questions']})"
            print(f"{name:5} {system:20} {f['questions']:>3} {f['latest_first_at_1']:>15.2f} "
                  f"{f['mrr']:>6.3f} {f['other_first']:>12.2f} {past:>21}")
    for name, systems in result["sets"].items():
        for miss in systems["palimpsest"]["misses"]:
            print(f"  miss [{name}] {miss['conversation']} {miss['question']!r}: first {miss['first']!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--data-dir", type=Path, help="keep the database here")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway data folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr), \
            bench_folder(args.data_dir, args.keep, "palimpsest-bench-latest-first-") as folder:
        settings = Settings(persistence="postgres", data_dir=folder / "data", auto_bootstrap=True)
        result = bench(settings)
    result["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        json.dump(result, sys.stdout, ensure_ascii=False, indent=2)
        print()
    else:
        report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
