"""Imports point down the path of a write (DESIGN §6): ``domain`` imports nothing of ours;
``infra`` and ``projections`` never import ``services`` — at the top of a module or inside a
function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("domain", "services", "infra", "projections")
FORBIDDEN = {"domain": ("services", "infra", "projections"),
             "infra": ("services",), "projections": ("services",)}


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
    return names & set(OURS)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    files = sorted((ROOT / layer).rglob("*.py"))
    assert files, f"no module in {layer}/"
    wrong = {str(p.relative_to(ROOT)): sorted(imported(p) & set(FORBIDDEN[layer])) for p in files}
    assert {p: found for p, found in wrong.items() if found} == {}
