"""``docker-compose.yml`` read as Docker Compose reads it (no engine here to run it): every
Palimpsest service runs a command our command line takes, with settings Palimpsest has; the
services ``--scale api=2 projector=2 ingest=2`` multiplies hold no fixed host port or container
name; the balancer publishes the API and sends every connection to the ``api`` replicas; the relay
stays one; a secret missing from ``.env`` stops ``up`` by name; ``.env.example`` names each."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from infra.settings import Settings
from services.entrypoints.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SCALED = ("api", "projector", "ingest")
#: Compose's own interpolation: ${NAME}, ${NAME:-default}, ${NAME:?message}.
_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)(?::?[-?]([^}]*))?\}")


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def ours(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if s.get("image") == "palimpsest:local"}


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    return dict(env) if isinstance(env, dict) else dict(item.split("=", 1) for item in env)


def test_every_command_is_one_our_command_line_takes() -> None:
    group = typer.main.get_group(cli)
    for name, service in ours(compose()["services"]).items():
        args = list(service.get("command") or [])
        assert args, f"{name} runs no command"
        with group.make_context("palimpsest", list(args), resilient_parsing=False) as context:
            command = group.get_command(context, args[0])
            assert command is not None, f"{name}: no command {args[0]!r}"
            command.make_context(args[0], args[1:])  # its options parse, or this raises


def test_every_setting_the_services_get_is_one_palimpsest_has() -> None:
    known = {f"PALIMPSEST_{field.upper()}" for field in Settings.model_fields}
    for name, service in ours(compose()["services"]).items():
        named = {key for key in environment(service) if key.startswith("PALIMPSEST_")}
        assert named <= known, f"{name}: {sorted(named - known)} are no settings"


@pytest.mark.parametrize("name", SCALED)
def test_a_scaled_service_has_no_fixed_host_port_or_name(name: str) -> None:
    service = compose()["services"][name]
    assert "ports" not in service and "container_name" not in service
    assert "profiles" not in service, f"{name} starts with a plain `docker compose up`"


def test_the_api_runs_no_pipeline_and_the_relay_and_workers_run_apart() -> None:
    services = compose()["services"]
    assert services["api"]["command"] == ["serve", "--no-pipeline"]
    assert services["api"]["expose"] == ["8765"]
    assert environment(services["api"])["PALIMPSEST_API_HOST"] == "0.0.0.0"
    assert [services[n]["command"] for n in ("relay", "projector", "ingest")] == [
        ["relay"], ["project"], ["ingest-worker"]]
    assert "deploy" not in services["relay"], "one relay"


def test_the_balancer_publishes_the_api_and_sends_connections_to_every_replica() -> None:
    found = compose()
    balancer = found["services"]["balancer"]
    assert balancer["ports"] == ["${API_PUBLISH_ADDRESS:-127.0.0.1}:${API_PUBLISH_PORT:-8765}:8765"]
    assert balancer["depends_on"]["api"]["condition"] == "service_healthy"
    (config,) = balancer["configs"]
    text = found["configs"][config["source"]]["content"]
    assert config["target"] == "/etc/nginx/conf.d/default.conf"
    assert "server api:8765 resolve;" in text and "resolver 127.0.0.11" in text
    assert "listen 8765;" in text and "proxy_pass http://palimpsest_api;" in text
    assert "proxy_buffering off;" in text, "MCP's event streams pass unbuffered"
    assert "$$http_host" in text and not re.search(r"(?<!\$)\$[a-z]", text), \
        "nginx's variables escaped from compose's interpolation"


def test_every_required_secret_is_named_in_env_example() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    required = {name for name, message in _VARIABLE.findall(text) if message.startswith("set ")}
    example = (ROOT / ".env.example").read_text()
    listed = set(re.findall(r"^([A-Z0-9_]+)=\s*$", example, flags=re.M))
    assert "PALIMPSEST_CONSOLE_SESSION_KEY" in required
    assert required == listed, f"required {sorted(required)}, .env.example {sorted(listed)}"


def _database_user(service: dict[str, Any]) -> str:
    url = environment(service)["PALIMPSEST_DATABASE_URL"]
    found = re.match(r"postgresql://([^:@/]+)[:@]", url)
    assert found, url
    return found.group(1)


def test_only_init_db_connects_as_the_superuser_and_each_service_as_its_role() -> None:
    """Decision 0018: the superuser (the postgres image's ``POSTGRES_USER``) prepares the database
    once; the HTTP edge, relay, projectors and workers run as the roles Palimpsest makes."""
    services = compose()["services"]
    superuser = environment(services["postgres"])["POSTGRES_USER"]
    defaults = Settings.model_fields
    runtime, projector, http = (defaults[f].default for f in ("runtime_role", "projector_role",
                                                              "http_role"))
    users = {name: _database_user(service) for name, service in ours(services).items()}
    assert users.pop("init-db") == superuser
    assert superuser not in users.values()
    assert users == {"api": runtime, "relay": runtime, "projector": projector, "ingest": runtime,
                     "demo": runtime}
    for name, service in ours(services).items():
        assert "POSTGRES_PASSWORD" not in str(environment(service)) or name == "init-db", name
    # the api's HTTP worker processes switch to the HTTP role: its password is there
    assert environment(services["api"])["PALIMPSEST_HTTP_PASSWORD"].startswith(
        "${PALIMPSEST_HTTP_PASSWORD:?")
    assert http != runtime
