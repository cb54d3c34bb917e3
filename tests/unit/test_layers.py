"""Imports point down the path of a write (DESIGN §6): ``domain`` imports nothing of ours;
``infra`` and ``projections`` never import ``services`` — at the top of a module or inside a
function. The edges live together in ``services/entrypoints/``: the command line, REST, MCP and
the process mains — and the console, a person's pages of the REST app, in ``services/console/``;
only they import the composition root ``services/bootstrap.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("domain", "services", "infra", "projections")
FORBIDDEN = {"domain": ("services", "infra", "projections"),
             "infra": ("services",), "projections": ("services",)}
ENTRYPOINTS = ROOT / "services" / "entrypoints"
#: The edges: the entrypoints, and the console's pages (served by the REST app).
EDGES = (ENTRYPOINTS, ROOT / "services" / "console")
#: The libraries of an edge: a command line (typer) or an HTTP server (uvicorn).
EDGE_LIBRARIES = {"typer", "uvicorn"}


def modules(path: Path) -> set[str]:
    """Every module ``path`` imports, dotted in full (``from a import b`` counts ``a`` and
    ``a.b``: ``b`` may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def imported(path: Path) -> set[str]:
    """The top-level packages of ours that ``path`` imports."""
    return {name.split(".")[0] for name in modules(path)} & set(OURS)


def calls(path: Path, function: str) -> bool:
    """Whether ``path`` calls ``function`` (by its bare name or as an attribute)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            called = node.func
            name = called.id if isinstance(called, ast.Name) else (
                called.attr if isinstance(called, ast.Attribute) else None)
            if name == function:
                return True
    return False


def ours() -> list[Path]:
    return sorted(p for layer in OURS for p in (ROOT / layer).rglob("*.py"))


def outside_entrypoints() -> list[Path]:
    return [p for p in ours() if not any(p.is_relative_to(edge) for edge in EDGES)]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    files = sorted((ROOT / layer).rglob("*.py"))
    assert files, f"no module in {layer}/"
    wrong = {rel(p): sorted(imported(p) & set(FORBIDDEN[layer])) for p in files}
    assert {p: found for p, found in wrong.items() if found} == {}


def test_only_the_entrypoints_import_the_composition_root() -> None:
    assert (ROOT / "services" / "bootstrap.py").is_file()
    wrong = [rel(p) for p in outside_entrypoints()
             if p.name != "bootstrap.py" and "services.bootstrap" in modules(p)]
    assert wrong == []


def test_no_command_line_or_server_outside_the_entrypoints() -> None:
    """typer (a command line, a Typer app) and uvicorn (an HTTP server) are for the edges only."""
    assert any(EDGE_LIBRARIES & {m.split(".")[0] for m in modules(p)} for p in ours()), \
        "the check sees no edge at all"
    wrong = {rel(p): sorted(EDGE_LIBRARIES & {m.split(".")[0] for m in modules(p)})
             for p in outside_entrypoints()}
    assert {p: found for p, found in wrong.items() if found} == {}


def test_the_process_mains_are_entrypoints() -> None:
    """A function that owns a process — its signals, its forced stop (``process_shutdown``) — is
    in ``services/entrypoints/``; ``infra`` only provides the parts."""
    mains = [rel(p) for p in ours() if calls(p, "process_shutdown")]
    assert any(p.startswith("services/entrypoints/") for p in mains), "the check sees no process main"
    wrong = [p for p in mains if not p.startswith("services/entrypoints/")]
    assert wrong == []


def test_the_command_line_is_one_package_of_the_entrypoints() -> None:
    """``services.entrypoints.cli`` (``python -m services.entrypoints.cli`` is ``palimpsest``); no
    command-line module left beside the use cases."""
    assert (ENTRYPOINTS / "cli" / "__init__.py").is_file() and (ENTRYPOINTS / "cli" / "__main__.py").is_file()
    left = [*(ROOT / "services").glob("cli.py"), *(ROOT / "services").glob("cli_*.py")]
    assert [rel(p) for p in left] == []
