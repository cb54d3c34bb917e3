"""The figures, pure: turn recall@k, session recall_any@k, empty answers and latency, per category
and over categories 1–4 (adversarial questions apart), for each ranking system."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.query.retrieval.breaker import nearest_rank
from tests.benchmarks.conversations.dataset import CATEGORIES, session_of

KS = (5, 10)
HEADLINE = (1, 2, 3, 4)


@dataclass(frozen=True)
class Answer:
    """One question as one system answered it: the dialog ids it ranked, best first."""

    category: int
    evidence: tuple[str, ...]
    ranked: tuple[str, ...]
    ms: float | None = None  # the call's latency, client side (the served search only)


def turn_recall(answer: Answer, k: int) -> float:
    """The share of the question's evidence dialog ids among its top ``k``."""
    top = set(answer.ranked[:k])
    return sum(1 for e in answer.evidence if e in top) / len(answer.evidence)


def session_recall_any(answer: Answer, k: int) -> float:
    """1 when any of the top ``k`` comes from a session that holds evidence."""
    sessions = {session_of(e) for e in answer.evidence}
    return float(any(session_of(r) in sessions for r in answer.ranked[:k]))


def figures(answers: Sequence[Answer]) -> dict[str, float | int | None]:
    """The figures over ``answers``; recall only over questions with evidence left."""
    scored = [a for a in answers if a.evidence]
    found: dict[str, float | int | None] = {"questions": len(answers), "with_evidence": len(scored)}
    for k in KS:
        found[f"turn_recall@{k}"] = _mean(turn_recall(a, k) for a in scored)
        found[f"session_recall_any@{k}"] = _mean(session_recall_any(a, k) for a in scored)
    found["empty"] = sum(1 for a in answers if not a.ranked)
    times = [a.ms for a in answers if a.ms is not None]
    found["p50_ms"] = round(statistics.median(times), 1) if times else None
    found["p95_ms"] = round(nearest_rank(times), 1) if times else None
    return found


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return round(sum(items) / len(items), 4) if items else None


def by_category(answers: Sequence[Answer]) -> dict[str, dict[str, float | int | None]]:
    """``overall`` (categories 1–4), each category present by name, ``adversarial`` apart."""
    groups = {"overall": [a for a in answers if a.category in HEADLINE]}
    for number, name in CATEGORIES.items():
        chosen = [a for a in answers if a.category == number]
        if chosen:
            groups[name] = chosen
    return {name: figures(chosen) for name, chosen in groups.items()}
