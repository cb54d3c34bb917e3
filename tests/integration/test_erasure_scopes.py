"""The scope matrix of forgetting, on the embedded PostgreSQL: each unit (card, slot, subject,
session, tenant) × each surface that offers it (REST, MCP, ``/mem0``, the console, the command line
over a server, the Python client) × each key (read, write, admin, erase, write+erase) is allowed or
refused as the harm asks — a card or a slot needs ``memory:write`` (admin holds it), a subject, a
session or a tenant ``memory:erase`` — and a refused call answers 403 with ``permission_denied``
and destroys nothing (the event log's head does not move). One app and one server per module, a
tenant per case."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from palimpsest_client import Client, PermissionDeniedError
from typer.testing import CliRunner

from services.bootstrap import Services
from services.command.commands import IngestTurn
from services.entrypoints.cli import cli
from tests.integration.api_support import address, client, new_tenant, ok, services
from tests.integration.rest_server import ServedApi
from tests.integration.test_mcp import Served, ToolFailed, call

__all__ = ["client", "services"]  # the fixtures

pytestmark = pytest.mark.integration

KEYS: dict[str, tuple[str, ...]] = {
    "read": ("memory:read",), "write": ("memory:write",), "admin": ("memory:admin",),
    "erase": ("memory:erase",), "write+erase": ("memory:write", "memory:erase")}
#: Which keys may erase each unit.
ALLOWED = {"card": {"write", "admin", "write+erase"}, "slot": {"write", "admin", "write+erase"},
           "subject": {"erase", "write+erase"}, "session": {"erase", "write+erase"},
           "tenant": {"erase", "write+erase"}}
UNITS = tuple(ALLOWED)
SUBJECT, LABEL, SESSION = "alice", "address", "chat-1"


class Case:
    """One tenant holding a card of ``alice``'s address said in session ``chat-1`` (and a turn of
    that session), and a key of that tenant with the scopes under test."""

    def __init__(self, services: Services, rest: TestClient, scopes: tuple[str, ...]) -> None:
        self.tenant = new_tenant()
        _, seeding = services.keys.create(self.tenant, ("memory:admin",), "seed")
        written = ok(rest.post("/v1/memories", headers={"Authorization": f"Bearer {seeding}"},
                               json={**address("Kyoto", session_id=SESSION, turn_id="1"),
                                     "subject": SUBJECT}))
        services.app.ingest_turn(self.tenant, IngestTurn(
            session_id=SESSION, turn_id="2", role="user", text="I moved to Kyoto",
            said_at=datetime.now(UTC), speaker=SUBJECT))
        self.card_id = str(written["card_id"])
        _, self.secret = services.keys.create(self.tenant, scopes, "scope matrix")

    def fields(self, unit: str) -> dict[str, Any]:
        """What ``forget`` names for ``unit``."""
        return {"card": {"card_id": self.card_id}, "slot": {"subject": SUBJECT, "label": LABEL},
                "subject": {"subject": SUBJECT}, "session": {"session_id": SESSION},
                "tenant": {}}[unit]


#: A surface: erase ``unit`` of the case; True when done, False when refused with the stable code.
Surface = Callable[[Case, str], bool]


class Surfaces:
    def __init__(self, rest: TestClient, served: ServedApi, mcp: Served) -> None:
        self.rest, self.served, self.mcp = rest, served, mcp

    def over_rest(self, case: Case, unit: str) -> bool:
        headers = {"Authorization": f"Bearer {case.secret}"}
        if unit == "card":  # the DELETE route, and the body's unit card below
            answer = self.rest.delete(f"/v1/cards/{case.card_id}", headers=headers)
            if answer.status_code != 202:
                return _refused(answer.status_code, answer.json()["error"]["code"])
        answer = self.rest.post("/v1/erasures", json={"unit": unit, **case.fields(unit)},
                                headers=headers)
        return answer.status_code == 202 or _refused(answer.status_code,
                                                     answer.json()["error"]["code"])

    def over_mcp(self, case: Case, unit: str) -> bool:
        async def forget(session: Any) -> dict[str, Any]:
            try:
                return await call(session, "forget", {"unit": unit, **case.fields(unit)})
            except ToolFailed as failed:  # answered in the session: it closes cleanly
                return {"refused": failed.error["code"]}

        answer = self.mcp.run(case.secret, forget)
        return answer.get("unit") == unit or _refused(403, answer["refused"])

    def over_mem0(self, case: Case, unit: str) -> bool:
        path = {"card": f"/mem0/v1/memories/{case.card_id}/",
                "subject": f"/mem0/v1/memories/?user_id={SUBJECT}",
                "session": f"/mem0/v1/memories/?run_id={SESSION}"}[unit]
        answer = self.rest.delete(path, headers={"Authorization": f"Token {case.secret}"})
        return answer.status_code == 200 or _refused(answer.status_code,
                                                     answer.json()["error"]["code"])

    def in_the_console(self, case: Case, unit: str) -> bool:
        with TestClient(self.rest.app, follow_redirects=False) as browser:
            form = browser.get("/console/sign-in")
            signed = browser.post("/console/sign-in", data={"key": case.secret,
                                                             "csrf_token": _token(form.text)})
            assert signed.status_code == 303, signed.text
            csrf = _token(browser.get("/console/operations").text)
            answer = browser.post("/console/operations/erasures", data={
                "unit": unit, **case.fields(unit), "confirmed": "yes", "csrf_token": csrf})
        if answer.status_code == 303:
            return True
        code = "permission_denied" if "(permission_denied)" in answer.text else answer.text
        return _refused(answer.status_code, code)

    def over_the_cli(self, case: Case, unit: str) -> bool:
        named = {"card": [case.card_id], "slot": ["--subject", SUBJECT, "--label", LABEL],
                 "subject": [SUBJECT], "session": [SESSION], "tenant": ["--yes"]}[unit]
        env = {"PALIMPSEST_URL": self.served.url, "PALIMPSEST_KEY": case.secret}
        ran = CliRunner().invoke(cli, ["forget", unit, *named, "--json"], env=env)
        said = json.loads(ran.stdout)
        if ran.exit_code == 0:
            return said["unit"] == unit
        assert ran.exit_code == 2, ran.stdout
        if unit not in ("card", "slot"):  # the refusal says how to get the scope
            assert "--scope memory:erase" in said["error"]["message"], said
        return _refused(said["error"].get("status", 403), said["error"]["code"])

    def with_the_client(self, case: Case, unit: str) -> bool:
        with Client(self.served.url, case.secret) as memory:
            try:
                return memory.forget(unit, **case.fields(unit))["unit"] == unit
            except PermissionDeniedError as error:
                return _refused(error.status, error.code)


def _refused(status: int, code: str) -> bool:
    assert (status, code) == (403, "permission_denied")
    return False


def _token(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


@pytest.fixture(scope="module")
def surfaces(client: TestClient, services: Services) -> Iterator[Surfaces]:
    with ServedApi(services) as served, Served(services) as mcp:
        yield Surfaces(client, served, mcp)


#: Each surface and the units it offers (mem0 has no slot and no tenant; the console no tenant).
OFFERED = {"rest": UNITS, "mcp": UNITS, "mem0": ("card", "subject", "session"),
           "console": ("card", "slot", "subject", "session"), "cli": UNITS, "client": UNITS}
RUN = {"rest": Surfaces.over_rest, "mcp": Surfaces.over_mcp, "mem0": Surfaces.over_mem0,
       "console": Surfaces.in_the_console, "cli": Surfaces.over_the_cli,
       "client": Surfaces.with_the_client}
MATRIX = [(surface, unit, key) for surface, units in OFFERED.items() for unit in units
          for key in KEYS]


@pytest.mark.parametrize(("surface", "unit", "key"), MATRIX)
def test_each_unit_on_each_surface_needs_the_scope_its_harm_asks(
        surfaces: Surfaces, services: Services, client: TestClient, surface: str, unit: str,
        key: str) -> None:
    case = Case(services, client, KEYS[key])
    head = services.app.recorder.max_notification_id()
    done = RUN[surface](surfaces, case, unit)
    assert done is (key in ALLOWED[unit]), (surface, unit, key)
    moved = services.app.recorder.max_notification_id() != head
    assert moved is done  # an erasure is recorded when done; a refusal destroys nothing
