"""The report: one table per group of questions (rows: system; columns: the figures), or one JSON
object."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.benchmarks.conversations.metrics import Answer, by_category

#: The systems, in the order they are reported.
SYSTEMS = {"palimpsest": "Palimpsest (POST /v1/search)", "bm25": "BM25 over the same turns",
           "encoder": "the encoder alone (cosine)"}
COLUMNS = (("turn_recall@5", "turn R@5"), ("turn_recall@10", "turn R@10"),
           ("session_recall_any@5", "session R@5"), ("session_recall_any@10", "session R@10"),
           ("empty", "empty"), ("p50_ms", "p50 ms"), ("p95_ms", "p95 ms"))


@dataclass
class Report:
    dataset: str
    split: str
    conversations: list[str]
    turns: int
    encoder: str
    answers: dict[str, list[Answer]] = field(default_factory=dict)  # system → answers
    run: dict[str, Any] = field(default_factory=dict)  # ingest and settle figures
    notes: list[str] = field(default_factory=list)


def to_json(report: Report) -> dict[str, Any]:
    return {"dataset": report.dataset, "split": report.split,
            "conversations": report.conversations, "turns": report.turns,
            "questions": len(next(iter(report.answers.values()), [])), "encoder": report.encoder,
            "systems": {name: by_category(answers) for name, answers in report.answers.items()},
            "run": report.run, "notes": report.notes}


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "–"
    if key.endswith("_ms"):
        return f"{value:.1f}"
    return f"{value:.3f}" if "recall" in key else str(value)


def table(report: Report) -> str:
    """A markdown table per group (categories 1–4 first, then each category, adversarial last)."""
    data = to_json(report)
    groups: list[str] = []
    for system in data["systems"].values():
        groups.extend(g for g in system if g not in groups)
    lines = [f"{len(report.conversations)} conversations ({', '.join(report.conversations)}), "
             f"{report.turns} turns, {data['questions']} questions; split {report.split}; "
             f"encoder {report.encoder}"]
    for group in groups:
        label = "categories 1–4" if group == "overall" else group
        first = next(s[group] for s in data["systems"].values() if group in s)
        lines += ["", f"{label} ({first['with_evidence']} questions with evidence of "
                      f"{first['questions']})",
                  "| system | " + " | ".join(title for _, title in COLUMNS) + " |",
                  "|---" * (len(COLUMNS) + 1) + "|"]
        for name, system in data["systems"].items():
            row = system.get(group, {})
            lines.append(f"| {SYSTEMS.get(name, name)} | "
                         + " | ".join(_cell(key, row.get(key)) for key, _ in COLUMNS) + " |")
    lines += [""] + [f"{key}: {value}" for key, value in report.run.items()]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)
