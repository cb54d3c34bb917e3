"""Scoring, pure: one question's answer against its truth, then the figures of a checkpoint.

A returned item is a *hit* when it belongs to the expected slot (subject and label) and carries the
expected value (casefolded, whitespace collapsed), or is one of the expected events. *Stale
leakage* is a superseded value shown as current: for a system that marks superseded cards
(Palimpsest), any returned card of the asked slot not marked superseded whose value is not the
slot's valid one; for a ranked list without such marks, a stale value of the asked slot ranked
above the current one, or at rank 1 when the current one is absent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from statistics import mean
from typing import Any

from tests.benchmarks.aging.records import Answer, Item, Question, SlotKey, Snapshot, normalise_value

Row = dict[str, Any]


def is_hit(item: Item, slot: SlotKey, value: str) -> bool:
    return item.slot == slot and normalise_value(item.value) == normalise_value(value)


def rank_of(items: Sequence[Item], found: Callable[[Item], bool]) -> int | None:
    """1-based rank of the first item ``found`` accepts."""
    return next((i for i, item in enumerate(items, 1) if found(item)), None)


def hit_at(items: Sequence[Item], slot: SlotKey, value: str, k: int) -> bool:
    rank = rank_of(items, lambda item: is_hit(item, slot, value))
    return rank is not None and rank <= k


def leaks_marked(items: Sequence[Item], slot: SlotKey, value: str) -> bool:
    """A card of ``slot`` presented as current (not marked superseded) with a value not valid."""
    return any(item.slot == slot and not item.superseded and not is_hit(item, slot, value) for item in items)


def leaks_ranked(items: Sequence[Item], slot: SlotKey, value: str) -> bool:
    """A stale value of ``slot`` above the current one, or first when the current one is absent."""
    stale = rank_of(items, lambda item: item.slot == slot and not is_hit(item, slot, value))
    current = rank_of(items, lambda item: is_hit(item, slot, value))
    if stale is None:
        return False
    return stale < current if current is not None else stale == 1


def recall_at(items: Sequence[Item], refs: Iterable[int], k: int = 5) -> float:
    """Share of the expected items found in the top ``k``, out of at most ``k`` expected."""
    wanted = set(refs)
    if not wanted:
        return math.nan
    found = {item.ref for item in items[:k]} & wanted
    return len(found) / min(k, len(wanted))


def completeness(items: Sequence[Item], slot: SlotKey, values: Iterable[str]) -> float:
    """Share of the slot's valid items the returned list holds (however long it is)."""
    wanted = {normalise_value(v) for v in values}
    if not wanted:
        return math.nan
    found = {normalise_value(item.value) for item in items if item.slot == slot}
    return len(found & wanted) / len(wanted)


def alert_counts(alerted: set[SlotKey], snapshot: Snapshot) -> tuple[int, int]:
    """(alerts naming a slot with a pending case, alerts naming a slot without one)."""
    right = len(alerted & snapshot.conflicted)
    return right, len(alerted) - right


def aging_counts(items: Sequence[Item], snapshot: Snapshot) -> tuple[int, int, int]:
    """(true, false, missed) aging flags over the returned single-value cards: a card should be
    flagged when it holds its slot's valid value and that value is aging."""
    tp = fp = fn = 0
    for item in items:
        slot = item.slot
        valid = slot is not None and slot in snapshot.current and is_hit(item, slot, snapshot.current[slot])
        due = valid and slot in snapshot.aging
        tp, fp, fn = tp + (item.aging and due), fp + (item.aging and not due), fn + (due and not item.aging)
    return tp, fp, fn


def score(question: Question, answer: Answer, snapshot: Snapshot, *, marks_superseded: bool) -> Row:
    """One question's figures (None where a figure does not apply)."""
    items, row = answer.items, _base(question, answer)
    slot, expected = question.slot, question.expected
    if question.kind in ("current", "as_of_valid", "as_of_known") and slot is not None:
        row["hit1"], row["hit5"] = hit_at(items, slot, expected[0], 1), hit_at(items, slot, expected[0], 5)
    if question.kind == "current" and slot is not None:
        leaks = leaks_marked if marks_superseded else leaks_ranked
        row["leak"] = leaks(items, slot, expected[0])
    if question.kind == "temporal":
        row["recall5"] = recall_at(items, question.refs, 5)
    if question.kind == "multi" and slot is not None:
        row["completeness"] = completeness(items, slot, expected)
    if answer.alert_slots is not None and not question.as_of:
        row["alert_right"], row["alert_wrong"] = alert_counts(answer.alert_slots, snapshot)
        if question.conflict and slot is not None:
            row["alert_hit"] = slot in answer.alert_slots
        row["aging_tp"], row["aging_fp"], row["aging_fn"] = aging_counts(items, snapshot)
    return row


def _base(question: Question, answer: Answer) -> Row:
    return {"qid": question.qid, "split": question.split, "kind": question.kind, "lang": question.lang,
            "slot_kind": question.slot_kind, "names_label": question.names_label,
            "conflict": question.conflict, "ms": round(answer.ms, 2),
            "error": answer.error, "top": [_show(item) for item in answer.items[:3]]}


def _show(item: Item) -> str:
    """A returned item in a few words, for the report's rows."""
    where = f"{item.subject}/{item.label}: " if item.slot else f"[{item.kind}] "
    return (where + item.value)[:80] + (" (superseded)" if item.superseded else "")


# ---- a checkpoint's figures ---------------------------------------------------------------------


def share(rows: Iterable[Row], key: str, **where: Any) -> float | None:
    """Mean of ``key`` (booleans count as 0/1) over the rows matching ``where`` that have it."""
    values = [float(r[key]) for r in rows if r.get(key) is not None and not _nan(r[key])
              and all(r.get(k) == v for k, v in where.items())]
    return mean(values) if values else None


def ratio(right: int, wrong: int) -> float | None:
    return right / (right + wrong) if right + wrong else None


def percentile(samples: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0–100)."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summarise(rows: Sequence[Row]) -> dict[str, Any]:
    """Every figure of one system at one checkpoint."""
    total = {key: sum(r.get(key) or 0 for r in rows) for key in
             ("alert_right", "alert_wrong", "aging_tp", "aging_fp", "aging_fn")}
    has_alerts = any("alert_right" in r for r in rows)
    latencies = [r["ms"] for r in rows]
    return {
        "current_hit1": share(rows, "hit1", kind="current"),
        "current_hit5": share(rows, "hit5", kind="current"),
        "leakage": share(rows, "leak", kind="current"),
        "as_of_valid_hit1": share(rows, "hit1", kind="as_of_valid"),
        "as_of_known_hit1": share(rows, "hit1", kind="as_of_known"),
        "temporal_recall5": share(rows, "recall5", kind="temporal"),
        "multi_completeness": share(rows, "completeness", kind="multi"),
        "hit1_names_label": share(rows, "hit1", kind="current", names_label=True),
        "hit1_paraphrase": share(rows, "hit1", kind="current", names_label=False),
        "contradiction_recall": share(rows, "alert_hit") if has_alerts else None,
        "contradiction_precision": ratio(total["alert_right"], total["alert_wrong"]) if has_alerts else None,
        "aging_precision": ratio(total["aging_tp"], total["aging_fp"]) if has_alerts else None,
        "aging_recall": ratio(total["aging_tp"], total["aging_fn"]) if has_alerts else None,
        "latency_p50_ms": percentile(latencies, 50),
        "latency_p95_ms": percentile(latencies, 95),
        "questions": len(rows),
        "errors": sum(1 for r in rows if r.get("error")),
        "conflict_questions": sum(1 for r in rows if r.get("conflict")),
        "aging_due": total["aging_tp"] + total["aging_fn"],
        "by_lang_current_hit1": {lang: share(rows, "hit1", kind="current", lang=lang)
                                 for lang in sorted({r["lang"] for r in rows})},
        "by_slot_kind_current_hit1": {
            kind: share(rows, "hit1", kind="current", slot_kind=kind)
            for kind in sorted({r["slot_kind"] for r in rows if r["kind"] == "current"})},
    }


METRICS = ("current_hit1", "current_hit5", "leakage", "as_of_valid_hit1", "as_of_known_hit1",
           "temporal_recall5", "multi_completeness", "hit1_names_label", "hit1_paraphrase",
           "contradiction_precision", "contradiction_recall", "aging_precision", "aging_recall",
           "latency_p50_ms", "latency_p95_ms")


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
