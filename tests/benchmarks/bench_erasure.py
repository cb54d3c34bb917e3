"""How long forgetting takes under ``palimpsest serve``: from an erasure's 202 to the last read
model forgetting (the projector has applied the erasure: the cards are tombstones in every
table, their vectors and cache rows gone, the tables vacuumed).

    .venv/bin/python -m tests.benchmarks.bench_erasure [--cards 20] [--subject-cards 200] [--json]

One card erased ``--cards`` times (each a card of its own), then a subject holding
``--subject-cards`` cards at once: p50 / p95 seconds for the cards, seconds for the subject.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from palimpsest_client import Client

from infra.postgres import admin_database
from infra.settings import Settings
from tests.benchmarks.bench_api import TENANT, projected, serving, settle
from tests.benchmarks.folders import bench_folder


def forgotten(settings: Settings, position: int, timeout: float = 300.0) -> float:
    """Seconds until the tenant's read models hold ``position``."""
    started = time.perf_counter()
    with admin_database(settings).connect(autocommit=True) as conn:
        while projected(conn, settings.read_schema, TENANT) < position:
            if time.perf_counter() - started > timeout:
                raise SystemExit(f"the erasure was not projected within {timeout:.0f} s")
            time.sleep(0.02)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cards", type=int, default=20)
    parser.add_argument("--subject-cards", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    with bench_folder(None, False, "palimpsest-erasure-") as folder:
        settings = Settings(data_dir=folder / "data", auto_bootstrap=False)
        with serving(folder) as (server, _), Client(server.url, server.key) as api:
            figures = run(api, settings, args)
    if args.json:
        print(json.dumps(figures))


def run(api: Client, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    singles = [api.remember(kind="state", memory_type="fact", subject="user", label=f"note {i}",
                            content=f"a note to forget, number {i}") for i in range(args.cards)]
    last: dict[str, Any] = {}
    for i in range(args.subject_cards):
        last = api.remember(kind="state", memory_type="fact", subject="Erin", label=f"fact {i % 20}",
                            content=f"Erin's fact {i}")
    settle(settings, int(last["position"]))
    print(f"{args.cards} cards and {args.subject_cards} cards of one subject written and projected",
          flush=True)
    seconds = []
    for written in singles:
        erased = api.forget("card", card_id=written["card_id"], basis="benchmark")
        seconds.append(forgotten(settings, int(erased["position"])))
    began = time.perf_counter()
    erased = api.forget("subject", subject="Erin", basis="benchmark")
    answered = time.perf_counter() - began
    subject = forgotten(settings, int(erased["position"]))
    ordered = sorted(seconds)
    figures = {"card_p50_s": round(statistics.median(ordered), 3),
               "card_p95_s": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
               "subject_cards": len(erased["card_ids"]), "subject_answer_s": round(answered, 3),
               "subject_s": round(subject, 3)}
    print(f"one card: 202 → forgotten everywhere p50 {figures['card_p50_s']} s, "
          f"p95 {figures['card_p95_s']} s ({args.cards} erasures)")
    print(f"one subject ({figures['subject_cards']} cards): answered in {answered:.2f} s, "
          f"then forgotten everywhere in {subject:.2f} s")
    return figures


if __name__ == "__main__":
    main()
