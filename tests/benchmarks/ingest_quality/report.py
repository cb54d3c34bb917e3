"""The benchmark's output: a table with a column per split, or one JSON object."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from tests.benchmarks.ingest_quality.metrics import Quality, Ratio, RunFigures


@dataclass
class SplitResult:
    split: str
    quality: Quality
    run: RunFigures
    per_conversation: dict[str, Quality] = field(default_factory=dict)


@dataclass
class Report:
    model: str
    source: str  # scripted, replay of PATH, or the endpoint's URL
    code: str  # the serving code's commit
    splits: dict[str, SplitResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # how the server was set up, when not as shipped


def _rate(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _turns(run: RunFigures) -> str:
    return f"{_rate(run.turns_per_second)} ({run.turns} turns in {run.seconds:.1f} s)"


def _tokens(amount: int, run: RunFigures) -> str:
    estimated = "" if not run.estimated else (
        " (estimated: characters / 4)" if run.estimated == run.calls else
        f" (estimated for {run.estimated} of {run.calls} calls: characters / 4)")
    return f"{_rate(run.per_turn(amount), 0)}{estimated}"


def _queued(run: RunFigures) -> str:
    reasons = ", ".join(f"{reason} {count}" for reason, count in run.queued.items())
    return f"{sum(run.queued.values())}" + (f" ({reasons})" if reasons else "")


ROWS: list[tuple[str, Callable[[SplitResult], str]]] = [
    ("slot precision", lambda r: str(r.quality.precision)),
    ("slot recall", lambda r: str(r.quality.recall)),
    ("two cities (goal 0)", lambda r: r.quality.two_cities.count("single-value facts")),
    ("split facts", lambda r: r.quality.split_facts.count("facts")),
    ("supersessions right", lambda r: str(r.quality.supersessions)),
    ("multi-value completeness", lambda r: str(r.quality.completeness)),
    ("time anchoring right", lambda r: str(r.quality.anchoring)),
    ("not_facts stored (goal 0)", lambda r: r.quality.not_facts.count("not_facts")),
    ("turns/s", lambda r: _turns(r.run)),
    ("LLM calls per turn", lambda r: f"{_rate(r.run.per_turn(r.run.calls))} ({r.run.calls} calls)"),
    ("prompt tokens per turn", lambda r: _tokens(r.run.prompt_tokens, r.run)),
    ("completion tokens per turn", lambda r: _tokens(r.run.completion_tokens, r.run)),
    ("candidates → cards written", lambda r: f"{r.run.candidates} → {r.run.written}"),
    ("arbitration cases left open", lambda r: _queued(r.run)),
    ("dead letters", lambda r: str(r.run.dead_letters)),
]


def table(report: Report) -> str:
    """The figures, one row each, one column per split."""
    splits = list(report.splits.values())
    head = ["figure", *(f"{r.split} ({len(r.per_conversation)} conversations)" for r in splits)]
    rows = [head, *([name, *(cell(r) for r in splits)] for name, cell in ROWS)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [f"ingest quality — model {report.model} ({report.source}), code {report.code}",
             *(f"  {note}" for note in report.notes), ""]
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    unknown = sum(r.run.unknown for r in splits)
    if unknown:
        lines.append(f"\n{unknown} model call(s) about no turn of the dataset (or not in the recording) "
                     "were answered with no candidates")
    return "\n".join(lines)


def _ratio(ratio: Ratio) -> dict[str, Any]:
    return {"value": ratio.value, "hit": ratio.hit, "total": ratio.total}


def quality_json(quality: Quality) -> dict[str, Any]:
    return {f.name: _ratio(getattr(quality, f.name)) for f in fields(quality)}


def to_json(report: Report) -> dict[str, Any]:
    """One object: the run's model, source and code, and per split every figure."""
    splits = {}
    for name, result in report.splits.items():
        run = result.run
        splits[name] = {
            "quality": quality_json(result.quality),
            "run": {"turns": run.turns, "seconds": round(run.seconds, 3),
                    "turns_per_second": run.turns_per_second, "llm_calls": run.calls,
                    "llm_calls_per_turn": run.per_turn(run.calls),
                    "prompt_tokens_per_turn": run.per_turn(run.prompt_tokens),
                    "completion_tokens_per_turn": run.per_turn(run.completion_tokens),
                    "tokens_estimated": run.estimated, "candidates": run.candidates,
                    "cards_written": run.written, "arbitration_cases_open": run.queued,
                    "dead_letters": run.dead_letters,
                    "unknown_calls": run.unknown},
            "conversations": {cid: quality_json(q) for cid, q in result.per_conversation.items()},
        }
    return {"benchmark": "ingest-quality", "model": report.model, "source": report.source,
            "code": report.code, "notes": report.notes, "splits": splits}
