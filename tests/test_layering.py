"""The house reads top-down: each package imports only the layers below it, and benchmarks/ and tests/ import
mtpedge, never each other (checked on the source: every import statement, at module level or inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder -> the layers it may import, itself included (cli/, the root package `mtpedge`, may import anything)
ALLOWED = {
    "runtime": {"runtime"},
    "models": {"runtime", "models"},
    "export": {"runtime", "models", "export"},
    "bench": {"runtime", "models", "export", "bench"},
}
SUBPACKAGES = ("runtime", "models", "export", "bench", "server")


def layer_of(module: str) -> str | None:
    """The layer of an absolute module name: an mtpedge subpackage, 'cli', 'tests', 'benchmarks' or None."""
    parts = module.split(".")
    if parts[0] in ("tests", "benchmarks"):
        return parts[0]
    if parts[0] != "mtpedge" or len(parts) == 1:  # the root package itself holds only the version: every layer's
        return None
    return parts[1] if parts[1] in SUBPACKAGES else "cli"


def package_of(path: Path) -> tuple[str, ...]:
    """The import package of a source file: runtime/drafters/esp.py -> (mtpedge, runtime, drafters)."""
    folders = path.relative_to(ROOT).parts[:-1]
    if folders[0] in ("tests", "benchmarks"):
        return folders
    return ("mtpedge", *(folders[1:] if folders[0] == "cli" else folders))


def imported_layers(source: str, package: tuple[str, ...]) -> set[str]:
    """The layers the imports of `source` name, its relative imports read from `package`."""
    modules = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            modules.append(".".join((*base, *([node.module] if node.module else []))))
    return {layer for layer in map(layer_of, modules) if layer}


def layers_of_file(path: Path) -> set[str]:
    return imported_layers(path.read_text(), package_of(path))


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below_it(folder):
    wrong = {str(path.relative_to(ROOT)): sorted(layers_of_file(path) - ALLOWED[folder])
             for path in sorted((ROOT / folder).rglob("*.py"))}
    assert {path: layers for path, layers in wrong.items() if layers} == {}


@pytest.mark.parametrize("folder, other", [("benchmarks", "tests"), ("tests", "benchmarks")])
def test_benchmarks_and_tests_do_not_import_each_other(folder, other):
    assert [str(p.relative_to(ROOT)) for p in sorted((ROOT / folder).rglob("*.py")) if other in layers_of_file(p)] == []


def test_the_check_reads_relative_and_absolute_imports():
    models = package_of(ROOT / "models" / "dmtd_train.py")
    assert models == ("mtpedge", "models")
    assert imported_layers("from ..export.quality import HELD_TEXT", models) == {"export"}  # the old cycle
    assert imported_layers("def f():\n    from mtpedge.bench import suite", models) == {"bench"}
    assert imported_layers("from .drafters import esp\nimport numpy", package_of(ROOT / "runtime" / "x.py")) == {
        "runtime"}
    assert imported_layers("from tests.spec_bench import x", ("benchmarks",)) == {"tests"}
    assert package_of(ROOT / "cli" / "server" / "app.py") == ("mtpedge", "server")
    assert layer_of("mtpedge.bench_cmd") == "cli" and layer_of("mtpedge") is None
