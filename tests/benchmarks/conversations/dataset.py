"""LoCoMo's format read into turns and questions; the dev / test split over its conversations.

A file is a list of conversations, each ``{"sample_id", "conversation", "qa"}``: ``conversation``
holds ``speaker_a``, ``speaker_b``, ``session_N`` (turns ``{speaker, dia_id, text, img_url?,
blip_caption?}``) and ``session_N_date_time`` ("1:56 pm on 8 May, 2023", no zone: read as UTC);
``qa`` holds ``{question, answer | adversarial_answer, evidence: ["D3:11", …], category}``.

The split is a fixed rule over the conversation ids in sorted order: the conversation at place
``i`` is in ``dev`` when ``i % 5 < 3`` and in ``test`` otherwise (of five conversations the first
three tune, the last two test), so tuning on ``dev`` never reads a ``test`` conversation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SPLITS = ("dev", "test", "all")
#: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial (reported apart).
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_SESSION = re.compile(r"session_(\d+)")
_DIA = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    """One dialog turn: its dialog id (``D3:11``), session number, speaker and text as ingested."""

    dia_id: str
    session: int
    speaker: str
    text: str
    said_at: datetime


@dataclass(frozen=True)
class Question:
    question: str
    category: int
    evidence: tuple[str, ...]  # normalised dialog ids naming turns of the conversation


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def session_of(dia_id: str) -> int:
    """``D3:11`` → 3."""
    return int(dia_id[1:].split(":", 1)[0])


def said_at(raw: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → 2023-05-08 13:56 UTC."""
    return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turn_text(raw: dict[str, Any]) -> str:
    """``"Speaker: text"``, plus the caption of a photo the turn shares."""
    text = f"{raw['speaker']}: {raw['text']}"
    caption = raw.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


def normalised(evidence: list[str]) -> list[str]:
    """Dialog ids as LoCoMo's README says to read them: ``"D8:6; D9:17"`` split, ``"D:11:26"`` →
    ``D11:26``, ``"D30:05"`` → ``D30:5``; an entry naming no turn dropped."""
    ids: list[str] = []
    for entry in evidence:
        for part in re.split(r"[;,\s]+", str(entry)):
            found = _DIA.fullmatch(part.strip())
            if found:
                ids.append(f"D{int(found[1])}:{int(found[2])}")
    return list(dict.fromkeys(ids))


def conversation_of(raw: dict[str, Any]) -> Conversation:
    body = raw["conversation"]
    turns: list[Turn] = []
    sessions = sorted((int(m[1]), key) for key in body
                      if (m := _SESSION.fullmatch(key)) and isinstance(body[key], list))
    for number, key in sessions:
        when = said_at(body[f"{key}_date_time"])
        turns.extend(Turn(normalised([t["dia_id"]])[0], number, t["speaker"], turn_text(t), when)
                     for t in body[key])
    known = {t.dia_id for t in turns}
    questions = tuple(Question(str(q["question"]), int(q["category"]),
                               tuple(i for i in normalised(q.get("evidence", [])) if i in known))
                      for q in raw.get("qa", []))
    return Conversation(str(raw["sample_id"]), tuple(turns), questions)


def in_split(ids: list[str], split: str) -> list[str]:
    """The ids of ``split`` (see the module's rule), in sorted order."""
    ordered = sorted(ids)
    if split == "all":
        return ordered
    return [c for i, c in enumerate(ordered) if (i % 5 < 3) == (split == "dev")]


def load(path: Path, split: str = "all", only: list[str] | None = None) -> list[Conversation]:
    """The conversations of ``split`` in the file (or in the folder's one ``*.json``), limited to
    ``only`` when given (each must be in the split)."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if len(files) != 1:
            raise SystemExit(f"{path} holds {len(files)} .json files: give the dataset file")
        path = files[0]
    raw = {str(c["sample_id"]): c for c in json.loads(path.read_text(encoding="utf-8"))}
    chosen = in_split(list(raw), split)
    if only:
        missing = [c for c in only if c not in chosen]
        if missing:
            raise SystemExit(f"not in the {split} split of {path}: {', '.join(missing)}")
        chosen = [c for c in chosen if c in only]
    return [conversation_of(raw[c]) for c in chosen]
