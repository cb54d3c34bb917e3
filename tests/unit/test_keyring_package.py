"""The key ring's package (``infra.keyring``): its modules stand in layers, each importing only
those below it (no cycle), and every public name is importable from the package itself."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import infra.keyring

#: Lowest first: a module may import only the ones before it.
LAYERS = ("errors", "units", "wrapping", "tables", "destruction", "speakers", "postgres_table", "ring")
PACKAGE = Path(infra.keyring.__file__).parent


def _imported_siblings(name: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    return {node.module.removeprefix("infra.keyring.") for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module is not None
            and node.module.startswith("infra.keyring.")}


def test_every_module_of_the_package_has_its_layer() -> None:
    modules = {module.name for module in pkgutil.iter_modules([str(PACKAGE)])}
    assert modules == set(LAYERS)


def test_each_module_imports_only_the_layers_below_it() -> None:
    for depth, name in enumerate(LAYERS):
        above = _imported_siblings(name) - set(LAYERS[:depth])
        assert not above, f"infra.keyring.{name} imports {sorted(above)}"


def test_each_module_says_what_it_holds() -> None:
    for name in LAYERS:
        assert importlib.import_module(f"infra.keyring.{name}").__doc__


def test_every_name_the_repository_imports_from_the_package_is_exported() -> None:
    root = PACKAGE.parents[1]
    wanted: set[str] = set()
    for folder in ("domain", "infra", "projections", "services", "tests", "clients"):
        for path in (root / folder).rglob("*.py"):
            wanted |= {alias.name for node in ast.walk(ast.parse(path.read_text()))
                       if isinstance(node, ast.ImportFrom) and node.module == "infra.keyring"
                       for alias in node.names}
    assert {"KeyRing", "Unit", "open_keyring", "insert_made_keys"} <= wanted
    assert wanted <= set(infra.keyring.__all__)
    assert [name for name in infra.keyring.__all__ if not hasattr(infra.keyring, name)] == []
