"""Driving ``palimpsest serve`` over REST: a tenant and key per conversation, the turns handed over,
the wait until each turn is applied or dead-lettered, the cards read back.

Keys are made the way an operator makes them, ``palimpsest keys create --tenant T --json``, run
by the same code that serves (the checkout's, with ``--checkout``) on the server's data folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from palimpsest_client import Client

from tests.benchmarks.ingest_quality.dataset import Conversation
from tests.benchmarks.ingest_quality.metrics import Card

KEY_NAME = "bench ingest-quality"
DONE = ("applied", "dead_letter")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def tenant_of(conversation: Conversation, run: str) -> str:
    """The conversation's own tenant (``iq<run>-<id>``): its "user" meets no other's."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"iq{run}-{conversation.id}")[:64]


@dataclass(frozen=True)
class Code:
    """Where the serving code lives: this checkout (``root`` None) or another one."""

    root: Path | None = None

    def env(self, folder: Path) -> dict[str, str]:
        env = {**os.environ, "PALIMPSEST_DATA_DIR": str(folder / "data")}
        env.pop("PALIMPSEST_DATABASE_URL", None)
        env.pop("PALIMPSEST_KAFKA_BOOTSTRAP", None)
        if self.root is not None:
            env["PYTHONPATH"] = str(self.root)
        return env

    def describe(self) -> str:
        """The code's commit (``git describe --always --dirty``), with its folder when another."""
        where = self.root or Path(__file__).resolve().parents[3]
        done = subprocess.run(["git", "-C", str(where), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, check=False)
        commit = done.stdout.strip() or "unknown commit"
        return f"{commit} ({where})" if self.root is not None else commit


def make_key(code: Code, folder: Path, tenant: str) -> str:
    """A read-write key for ``tenant``, through ``palimpsest keys create``."""
    done = subprocess.run([sys.executable, "-m", "services.entrypoints.cli", "keys", "create",
                           "--tenant", tenant, "--name", KEY_NAME, "--json"],
                          env=code.env(folder), cwd=code.root or folder, capture_output=True,
                          text=True, timeout=120, check=False)
    try:
        return str(json.loads(done.stdout)["secret"])
    except (ValueError, KeyError):
        raise SystemExit(f"palimpsest keys create --tenant {tenant} failed:\n{done.stdout}\n"
                         f"{done.stderr[-2000:]}") from None


def make_keys(code: Code, folder: Path, tenants: list[str]) -> dict[str, str]:
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(tenants, pool.map(lambda t: make_key(code, folder, t), tenants), strict=True))


def turns_of(conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation's turns as the ingest call takes them: one session, in order."""
    return [{"session_id": conversation.id, "turn_id": t.turn_id, "role": t.role, "text": t.text,
             "said_at": t.said_at.isoformat(), "timezone": conversation.timezone}
            for t in conversation.turns]


class Watch:
    """Each tenant's ingested turns that are done (applied or dead-lettered), polled over REST."""

    def __init__(self, url: str, keys: dict[str, str], expected: dict[str, int]) -> None:
        self.expected = expected  # tenant → turns
        self.clients = {tenant: Client(url, key, timeout=60) for tenant, key in keys.items()}
        self.done: dict[str, int] = {}
        self.dead: dict[str, int] = {}
        self.last_change = time.monotonic()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *_: object) -> None:
        for client in self.clients.values():
            client.close()

    def poll(self) -> None:
        for tenant, api in self.clients.items():
            if self.done.get(tenant, 0) >= self.expected[tenant]:
                continue
            counts = api.ingestions(limit=1)["counts"]
            done = sum(int(counts.get(status, 0)) for status in DONE)
            if done != self.done.get(tenant, 0):
                self.last_change = time.monotonic()
            self.done[tenant], self.dead[tenant] = done, int(counts.get("dead_letter", 0))

    @property
    def finished(self) -> int:
        return sum(self.done.values())

    @property
    def total(self) -> int:
        return sum(self.expected.values())


def ingest(url: str, keys: dict[str, str], conversations: dict[str, Conversation]) -> None:
    """Every conversation's turns, in order, one call per conversation, conversations side by side."""
    def hand_over(tenant: str) -> None:
        with Client(url, keys[tenant], timeout=120) as api:
            answer = api.ingest(turns_of(conversations[tenant]))
        if not answer["extraction"]["on"]:
            raise SystemExit(f"extraction is off in the server: {answer['extraction']['note']}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(hand_over, keys))


def wait(watch: Watch, label: str, stall: Callable[[], float], activity: Callable[[], float],
         calls: Callable[[], int]) -> float:
    """Until every turn is done; the monotonic time it was seen. Exits when nothing moved (no turn
    done, no model answer) for ``stall()`` seconds."""
    started = last_print = time.monotonic()
    while True:
        watch.poll()
        now = time.monotonic()
        if watch.finished >= watch.total:
            progress(f"[{label}] {watch.finished}/{watch.total} turns done, "
                     f"{sum(watch.dead.values())} dead-lettered, {now - started:.0f} s")
            return now
        quiet = now - max(watch.last_change, activity())
        if quiet > stall():
            pending = [t for t in watch.expected if watch.done.get(t, 0) < watch.expected[t]]
            raise SystemExit(f"[{label}] nothing moved for {quiet:.0f} s: {watch.finished}/"
                             f"{watch.total} turns done; waiting on {', '.join(pending)}")
        if now - last_print >= 10:
            last_print = now
            progress(f"[{label}] {watch.finished}/{watch.total} turns done, "
                     f"{sum(watch.dead.values())} dead-lettered, {calls()} LLM calls, "
                     f"{now - started:.0f} s")
        time.sleep(0.25 if watch.total - watch.finished < 8 else 0.5)


def _when(raw: str | None) -> datetime | None:
    return datetime.fromisoformat(raw) if raw else None


def card_of(row: dict[str, Any]) -> Card:
    return Card(kind=row["kind"], subject=row.get("subject"), label=row.get("label"),
                value=row.get("content") or "", current=not row.get("superseded", False),
                valid_from=_when(row.get("valid_from")), valid_to=_when(row.get("valid_to")),
                occurred_at=_when(row.get("occurred_at")), status=row.get("status"),
                card_id=str(row["card_id"]))


@dataclass
class ReadBack:
    """A tenant's cards (the turns' own episodic cards left out), its ingested turns and the
    reasons of its pending arbitration cases."""

    cards: list[Card]
    ingestions: list[dict[str, Any]]
    queued: list[str]

    @property
    def dead_letters(self) -> int:
        return sum(1 for i in self.ingestions if i["status"] == "dead_letter")

    @property
    def candidates(self) -> int:
        """The candidates the model proposed, over every turn."""
        return sum(int(i.get("candidates") or 0) for i in self.ingestions)

    @property
    def written(self) -> int:
        """The cards the candidates became."""
        return sum(len(i.get("card_ids") or ()) for i in self.ingestions)


def read_back(url: str, key: str) -> ReadBack:
    with Client(url, key, timeout=60) as api:
        ingestions = api.ingestions(limit=1_000)["ingestions"]
        queued = [str(case.get("reason", "")).split(":", 1)[0] for case in api.arbitrations()["cases"]]
        turn_cards = {str(i["event_card_id"]) for i in ingestions}
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = api.cards(include_superseded=True, limit=500, cursor=cursor)
            rows.extend(page["cards"])
            cursor = page.get("next_cursor")
            if not cursor:
                break
    cards = [card_of(row) for row in rows if str(row["card_id"]) not in turn_cards]
    return ReadBack(cards, ingestions, queued)
