"""What the benchmark prints and saves: a table per checkpoint (a row per system and split, dev and
test side by side), a summary, ``aging.json`` with everything, and two plots (hit@1 and leakage per
checkpoint; dev solid, test dashed).

``aging.json``: ``splits`` → ``dev`` / ``test`` → ``checkpoints`` (day → system → figures) and
``summary`` (system → figures averaged over the checkpoints)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any

from tests.benchmarks.aging import phrasings
from tests.benchmarks.aging.metrics import METRICS, Row
from tests.benchmarks.aging.records import Question

if TYPE_CHECKING:
    from tests.benchmarks.aging.generator import Corpus
    from tests.benchmarks.aging.runner import Writer

COLUMNS = (("cur@1", "current_hit1"), ("cur@5", "current_hit5"), ("leak", "leakage"),
           ("asofV@1", "as_of_valid_hit1"), ("asofK@1", "as_of_known_hit1"), ("temp@5", "temporal_recall5"),
           ("multi", "multi_completeness"), ("label@1", "hit1_names_label"), ("para@1", "hit1_paraphrase"),
           ("contrP", "contradiction_precision"), ("contrR", "contradiction_recall"),
           ("ageP", "aging_precision"), ("ageR", "aging_recall"), ("p50ms", "latency_p50_ms"),
           ("p95ms", "latency_p95_ms"))
NAME_WIDTH = 34
SplitFigures = dict[str, dict[str, dict[str, Any]]]  # split → system → figures


def _cell(key: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.0f}" if key.endswith("_ms") else f"{value:.2f}"


def table(figures: dict[str, dict[str, Any]]) -> list[str]:
    """One header line, then a line per system."""
    lines = ["system".ljust(NAME_WIDTH) + "".join(f"{head:>8}" for head, _ in COLUMNS)]
    for name, row in figures.items():
        lines.append(name.ljust(NAME_WIDTH) + "".join(f"{_cell(key, row.get(key)):>8}" for _, key in COLUMNS))
    return lines


def side_by_side(figures: SplitFigures) -> dict[str, dict[str, Any]]:
    """Each system's figures on each split, the splits of a system next to each other."""
    systems = dict.fromkeys(name for split in figures.values() for name in split)
    return {f"{name} · {split}": figures[split][name] for name in systems for split in figures
            if name in figures[split]}


def print_checkpoint(day: int, moment: datetime, figures: SplitFigures, questions: list[Question]) -> None:
    kinds = Counter(f"{q.split} {q.kind}" for q in questions)
    conflicts = sum(q.conflict for q in questions)
    print(f"\n== day {day} ({moment:%Y-%m-%d %H:%M %z}): {len(questions)} questions "
          f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}; {conflicts} on slots with a pending "
          "case) ==", flush=True)
    for line in table(side_by_side(figures)):
        print(line, flush=True)


def means(figures: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    """Each system's metrics averaged over the checkpoints that have them."""
    systems = dict.fromkeys(name for day in figures.values() for name in day)
    found: dict[str, dict[str, float | None]] = {}
    for name in systems:
        found[name] = {}
        for key in METRICS:
            values = [day[name][key] for day in figures.values()
                      if name in day and day[name].get(key) is not None]
            found[name][key] = mean(values) if values else None
    return found


def print_summary(result: dict[str, Any]) -> None:
    splits = result["splits"]
    summary = side_by_side({split: found["summary"] for split, found in splits.items()})
    print(f"\n== summary: mean over checkpoints; settings: {result['meta']['settings']} ==")
    for line in table(summary):
        print(line)
    days = list(next(iter(splits.values()))["checkpoints"])
    for title, key in (("current-value hit@1", "current_hit1"), ("stale leakage", "leakage"),
                       ("label-named hit@1", "hit1_names_label"),
                       ("paraphrase hit@1 (label not named)", "hit1_paraphrase")):
        print(f"\n{title} by day:".ljust(NAME_WIDTH + 1) + "".join(f"{'d' + d:>8}" for d in days))
        for row in summary:
            name, split = row.rsplit(" · ", 1)
            print(row.ljust(NAME_WIDTH) + "".join(
                f"{_cell(key, splits[split]['checkpoints'][d].get(name, {}).get(key)):>8}" for d in days))
    corpus = result["corpus"]
    print(f"\ncorpus: {corpus['writes']} writes ({corpus['subjects']} subjects, {corpus['slots']} slots, "
          f"{corpus['state_cards']} state cards, {corpus['arbitration_cases']} arbitration cases) in "
          f"{len(result['meta']['config']['checkpoints'])} checkpoints; {result['meta']['seconds']:.0f} s")
    for name, statuses in result["route_statuses"].items():
        missed = {k: v for k, v in sorted(statuses.items())
                  if k.endswith((":timeout", ":quarantined", ":error", ":unavailable"))}
        print(f"routes not answering for {name}: {missed or 'none'}")
    disagreements = result["disagreements"]["counts"]
    print(f"write outcomes that disagree with the model: {sum(disagreements.values())}")
    for what, count in sorted(disagreements.items(), key=lambda kv: -kv[1]):
        print(f"  {count:>5}  {what}")
    for note in result["notes"]:
        print(f"note: {note}")


def paraphrase_templates() -> dict[str, dict[str, list[str]]]:
    """Every current-value template that does not name the label, by kind and language."""
    return {kind: {lang: list(phrasings.current(kind, lang)[1]) for lang in ("en", "zh-Hant", "zh-Hans")}
            for kind in phrasings.PARAPHRASES}


def build(corpus: Corpus, figures: dict[str, SplitFigures], asked: dict[str, list[Question]],
          rows: dict[str, dict[str, list[Row]]], writer: Writer, notes: list[str],
          routes: dict[str, dict[str, int]], seconds: float, settings: str = "") -> dict[str, Any]:
    """``figures``: day → split → system → figures."""
    names = dict.fromkeys(split for day in figures.values() for split in day)
    splits = {}
    for split in names:
        checkpoints = {day: found[split] for day, found in figures.items() if split in found}
        splits[split] = {"checkpoints": checkpoints, "summary": means(checkpoints)}
    return {
        "meta": {"seed": corpus.config.seed, "config": dataclasses.asdict(corpus.config), "seconds": seconds,
                 "settings": settings,
                 "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                             "python": platform.python_version()},
                 "command": sys.argv, "date": datetime.now(UTC).isoformat()},
        "corpus": corpus.size(),
        "question_counts": {day: dict(Counter(f"{q.split} {q.kind}" for q in qs))
                            for day, qs in asked.items()},
        "splits": splits,
        "disagreements": {"counts": dict(writer.disagreements), "examples": writer.examples},
        "notes": notes,
        "route_statuses": routes,
        "paraphrase_templates": paraphrase_templates(),
        "questions": {day: [dataclasses.asdict(q) for q in qs] for day, qs in asked.items()},
        "rows": rows,
    }


def write(result: dict[str, Any], out: Path) -> list[Path]:
    """``aging.json`` and the two plots into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "aging.json"
    path.write_text(json.dumps(result, ensure_ascii=False, indent=1, default=str))
    return [path, plot(result, "current_hit1", "current-value hit@1", out / "aging-hit1.png"),
            plot(result, "leakage", "stale leakage (share of current-value questions)",
                 out / "aging-leakage.png")]


def plot(result: dict[str, Any], key: str, title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for style, (split, found) in zip(("-", "--"), result["splits"].items(), strict=False):
        days = [int(d) for d in found["checkpoints"]]
        for n, name in enumerate(found["summary"]):
            values = [found["checkpoints"][str(d)].get(name, {}).get(key) for d in days]
            axes.plot(days, [math.nan if v is None else v for v in values], marker="osD^v"[n % 5],
                      color=f"C{n}", linestyle=style, label=f"{name} · {split}")
    axes.set(xlabel="simulated day", ylabel=key, title=title, ylim=(0, 1.02))
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
