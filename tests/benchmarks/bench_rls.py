"""What keeping tenants apart in the database costs (decision 0018): writes/s and searches/s as
the HTTP role under row-level security, against the same workload on a copy without it, in one
run on the embedded PostgreSQL (two stores side by side in one server: ``events_rls`` /
``read_rls`` as ``init-db`` makes them, and ``events_plain`` / ``read_plain`` with the log's tenant
column and every policy taken off).

    .venv/bin/python -m tests.benchmarks.bench_rls [--writes 2000] [--clients 4] [--tenants 8]
        [--searches 400] [--rounds 3] [--json]

Each round writes ``--writes`` ``remember`` calls with ``--clients`` threads, each call for one
of ``--tenants`` tenants in turn (so a pooled connection changes tenant often, as an HTTP
worker's do): under RLS as the HTTP role, the tenant bound as a request binds it; on the copy as
the runtime role. Then ``--searches`` questions are asked, one at a time, of a second pair of
stores holding one tenant's ``--writes`` cards (written and projected once, before the
rounds). Figures are the median of the rounds (which store goes first alternates); the ratio is
RLS / plain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from psycopg import sql

from infra.postgres import admin_database, bootstrap, stop_embedded
from infra.settings import Settings
from infra.tenancy import acting_for
from infra.tenant_policies import tenant_tables
from projections.replay import catch_up, make_projector
from projections.schema import TABLES
from services.bootstrap import http_settings
from services.factory import create_app, create_queries
from tests.benchmarks.bench_commands import run_threads
from tests.benchmarks.folders import bench_folder
from tests.support import state

QUESTIONS = ("where does person 3 live?", "city near the river", "label 12", "number 40",
             "who lives by the river?")


def stores(data_dir: Path, prefix: str = "") -> dict[bool, Settings]:
    """The store under RLS and its plain copy: one server, two event and read schemas."""
    return {rls: Settings(persistence="postgres", data_dir=data_dir, auto_bootstrap=False,
                          event_schema=f"{prefix}events_{name}", read_schema=f"{prefix}read_{name}")
            for rls, name in ((True, "rls"), (False, "plain"))}


def strip_rls(settings: Settings) -> None:
    """The plain copy: no tenant column on the log, no row-level security anywhere."""
    admin = admin_database(settings)
    with admin.connect(autocommit=True) as conn:
        for schema, tables in ((settings.event_schema, tenant_tables()), (settings.read_schema, TABLES)):
            for table in tables:
                name = sql.Identifier(schema, table)
                conn.execute(sql.SQL("ALTER TABLE {} NO FORCE ROW LEVEL SECURITY").format(name))
                conn.execute(sql.SQL("ALTER TABLE {} DISABLE ROW LEVEL SECURITY").format(name))
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS tenant_id CASCADE").format(
            sql.Identifier(settings.event_schema, tenant_tables()[0])))


def edge(settings: Settings, rls: bool) -> Settings:
    """How the workload connects: the HTTP role under RLS, the runtime role on the copy."""
    return http_settings(settings) if rls else settings


def write(settings: Settings, rls: bool, clients: int, writes: int, tenants: list[str]) -> float:
    """Writes per second."""
    app = create_app(edge(settings, rls))
    try:
        for tenant in tenants:
            with acting_for(tenant if rls else None):
                app.remember(tenant, state("warm", "up"))

        def one(client: int, i: int) -> None:
            tenant = tenants[i % len(tenants)]
            with acting_for(tenant if rls else None):
                app.remember(tenant, state(f"label {i}", f"lives in city number {i}, near the river",
                                           subject=f"person {i % 50}"))

        began = time.perf_counter()
        run_threads(clients, writes, one)
        return writes / (time.perf_counter() - began)
    finally:
        app.close()


def project(settings: Settings) -> None:
    """The log applied to the read models, as the projector does (the cross-tenant roles)."""
    app = create_app(settings)
    projector = make_projector(settings, app, admin=admin_database(settings))
    try:
        catch_up(projector, app)
    finally:
        projector.close()
        app.close()


def search(settings: Settings, rls: bool, searches: int, tenants: list[str]) -> float:
    """Searches per second, one at a time."""
    queries = create_queries(edge(settings, rls))
    try:
        for i in range(len(QUESTIONS) * 2):  # warm: the model's first calls, the server's caches
            with acting_for(tenants[0] if rls else None):
                queries.search(tenants[0], QUESTIONS[i % len(QUESTIONS)])
        began = time.perf_counter()
        for i in range(searches):
            tenant = tenants[i % len(tenants)]
            with acting_for(tenant if rls else None):
                queries.search(tenant, QUESTIONS[i % len(QUESTIONS)])
        return searches / (time.perf_counter() - began)
    finally:
        queries.close()


def prepared(data_dir: Path, prefix: str = "") -> dict[bool, Settings]:
    """A store and its plain copy, bootstrapped; the copy's row-level security taken off."""
    settings_of = stores(data_dir, prefix)
    for settings in settings_of.values():
        bootstrap(admin_database(settings), settings)
    strip_rls(settings_of[False])
    return settings_of


def run(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    measured: dict[bool, dict[str, list[float]]] = {
        rls: {"writes_per_s": [], "searches_per_s": []} for rls in (True, False)}
    try:
        settings_of = prepared(data_dir)
        # Searches ask a store of one tenant's cards: a copy without policies holding several
        # tenants would read the others' rows too wherever a query leaves its tenant to them.
        searched, corpus = prepared(data_dir, "search_"), ["bench-search"]
        for rls in (True, False):
            write(searched[rls], rls, args.clients, args.writes, corpus)
            project(searched[rls])
        for round_ in range(args.rounds):
            tenants = [f"bench-{round_}-{n}" for n in range(args.tenants)]
            order = (True, False) if round_ % 2 == 0 else (False, True)
            for rls in order:
                rate = write(settings_of[rls], rls, args.clients, args.writes, tenants)
                measured[rls]["writes_per_s"].append(rate)
            for rls in order:
                found = search(searched[rls], rls, args.searches, corpus)
                measured[rls]["searches_per_s"].append(found)
                print(f"round {round_ + 1} {'rls  ' if rls else 'plain'}: "
                      f"{measured[rls]['writes_per_s'][-1]:7.0f} writes/s, {found:7.1f} searches/s",
                      flush=True)
    finally:
        stop_embedded(data_dir)
    figures: dict[str, Any] = {"writes": args.writes, "clients": args.clients,
                               "tenants": args.tenants, "searches": args.searches,
                               "rounds": args.rounds}
    print(f"{'':<16} {'rls':>9} {'plain':>9} {'rls/plain':>10}")
    for name in ("writes_per_s", "searches_per_s"):
        on, off = (statistics.median(measured[rls][name]) for rls in (True, False))
        figures[name] = {"rls": round(on, 1), "plain": round(off, 1), "ratio": round(on / off, 3)}
        print(f"{name:<16} {on:9.1f} {off:9.1f} {on / off:10.3f}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=2_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--searches", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    with bench_folder(None, False, "palimpsest-rls-") as folder:
        figures = run(folder / "data", args)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
