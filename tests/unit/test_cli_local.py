"""The command line without a database: a local command says it is one, refuses a data folder that
holds no database (and makes none), every command that answers has ``--json``, and ``serve`` names
a taken port and what to pass instead."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from services.entrypoints.cli import cli
from services.entrypoints.cli.local import LOCAL

#: Every local command but ``serve`` and ``init-db`` (which make the data folder): its path, and
#: what it needs to get as far as opening the database.
REFUSING: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("relay",), ()), (("project",), ()), (("pipeline",), ()), (("rebuild",), ()), (("status",), ()),
    (("mcp",), ()), (("ingest-worker",), ()), (("failures",), ()), (("failures", "retry"), ()),
    (("failures", "skip"), ("7", "--reason", "r", "--by", "b")),
    (("keys", "create"), ("--tenant", "t")), (("keys", "list"), ()), (("keys", "revoke"), ("k",)),
    (("retention", "apply"), ("--tenant", "t")), (("retention", "show"), ("--tenant", "t")),
    (("retention", "set"), ("--days", "3", "--tenant", "t")),
    (("forget", "card"), ("00000000-0000-0000-0000-000000000001", "--tenant", "t")),
    (("forget", "subject"), ("user", "--tenant", "t")), (("export",), ("--tenant", "t")),
)
#: Local too, on purpose making the data folder.
MAKING = (("serve",), ("init-db",), ("demo",))
#: Commands that run until stopped and log, or speak a protocol on stdout, or pass their options on:
#: no answer to print as JSON.
NO_ANSWER = {("relay",), ("project",), ("pipeline",), ("ingest-worker",), ("api-worker",), ("mcp",),
             ("demo",), ("bench", "aging"), ("bench", "ingest-quality"), ("bench", "conversations")}


def commands(group: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of ``palimpsest``, a group's own listing included (``failures``)."""
    group = typer.main.get_group(cli) if group is None else group
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group (typer's own Click)
            if command.invoke_without_command:
                yield (*path, name), command
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def options(command: Any) -> set[str]:
    return {flag for param in command.params for flag in getattr(param, "opts", ())}


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A working folder with no data folder in it, and the settings that would use one."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("PALIMPSEST_")]:
        monkeypatch.delenv(name)
    return {"PALIMPSEST_DATA_DIR": str(tmp_path / "data")}


@pytest.mark.parametrize(("path", "args"), REFUSING, ids=lambda v: " ".join(v))
def test_a_local_command_refuses_a_folder_without_a_database_and_makes_none(
        path: tuple[str, ...], args: tuple[str, ...], nowhere: dict[str, str], tmp_path: Path) -> None:
    json_too = () if path in NO_ANSWER else ("--json",)
    done = CliRunner().invoke(cli, [*path, *args, *json_too], env=nowhere)
    assert done.exit_code == 2, (done.output, done.exception)
    said = done.stdout + done.stderr
    assert "not_initialised" in said and str(tmp_path / "data") in said and "palimpsest serve" in said
    if json_too:
        assert json.loads(done.stdout)["error"]["code"] == "not_initialised"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "it made something"


def test_data_dir_names_the_folder(nowhere: dict[str, str], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    done = CliRunner().invoke(cli, ["keys", "list", "--data-dir", str(elsewhere), "--json"], env=nowhere)
    assert done.exit_code == 2 and str(elsewhere) in json.loads(done.stdout)["error"]["message"]
    assert not elsewhere.exists()


def test_every_local_command_says_so_in_its_help() -> None:
    for path in [path for path, _ in REFUSING] + list(MAKING):
        helped = CliRunner().invoke(cli, [*path, "--help"], env={"COLUMNS": "300"})
        assert LOCAL in " ".join(helped.stdout.split()), (path, helped.stdout)


def test_a_client_command_does_not_claim_to_be_local() -> None:
    for path in (("search",), ("cards",), ("ingestions",), ("proposals",)):
        helped = CliRunner().invoke(cli, [*path, "--help"], env={"COLUMNS": "300"})
        assert "local: opens" not in helped.stdout, path


def test_every_command_that_answers_takes_json() -> None:
    missing = [" ".join(path) for path, command in commands()
               if path not in NO_ANSWER and "--json" not in options(command)]
    assert missing == []


def test_cards_reads_over_the_server_and_never_the_folder(nowhere: dict[str, str],
                                                          tmp_path: Path) -> None:
    gone = CliRunner().invoke(cli, ["cards", "--url", "http://127.0.0.1:9", "--json"], env=nowhere)
    assert gone.exit_code == 1 and json.loads(gone.stdout)["error"]["code"] == "unreachable"
    tenant = CliRunner().invoke(cli, ["cards", "--tenant", "t1", "--json"], env=nowhere)
    assert tenant.exit_code == 2
    assert "the tenant is the key's" in json.loads(tenant.stdout)["error"]["message"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_serve_names_the_port_in_use_and_what_to_pass(nowhere: dict[str, str], tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")}
    try:
        for flags in ((), ("--json",)):
            done = subprocess.run([sys.executable, "-m", "services.entrypoints.cli", "serve", "--port",
                                   str(port), *flags], env={**env, **nowhere}, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=60)
            said = done.stdout + done.stderr
            assert done.returncode == 2 and "Traceback" not in said, said
            assert f"port {port} on 127.0.0.1 is already in use" in said and "--port" in said, said
            if flags:
                assert json.loads(done.stdout)["error"]["code"] == "cannot_listen"
    finally:
        taken.close()
    assert not (tmp_path / "data").exists(), "a serve that cannot listen makes nothing"


def test_serve_json_says_where_it_answers_and_the_key_it_made() -> None:
    from infra.settings import Settings
    from services.entrypoints.serve import Endpoints

    url = "http://127.0.0.1:8765"
    said = Endpoints(url, f"{url}/mcp/", "local", "key-1", "pk_secret").to_dict(Settings(data_dir=Path("d")))
    assert said == {"rest": f"{url}/v1", "docs": f"{url}/docs", "mcp": f"{url}/mcp/", "tenant_id": "local",
                    "key_id": "key-1", "key": "pk_secret", "database": "d", "broker": "embedded"}
    json.dumps(said)
