"""The import graph of engine/, studio/ and widgets/, computed from the code.

Two rules: no import circle between files of different packages (and no new
one inside a package), and no import from a lower layer to a higher one. The
layers are the import-linter ``layers`` contracts in pyproject.toml (the one
list of them, which ``lint-imports`` checks too, with the imports they
ignore); this test builds the graph itself from every import statement at any
depth (function-local and ``TYPE_CHECKING`` ones included), so it also finds
the circles that contracts cannot name, and prints each offender.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "studio", "widgets")

Graph = dict[str, set[str]]


def modules() -> dict[str, Path]:
    """Every module of the three packages by dotted name (a package by its
    ``__init__.py``)."""
    found = {}
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported_names(tree: ast.Module, package: str) -> Iterator[str]:
    """The dotted names a module's import statements name, relative ones
    resolved against ``package``; ``from m import x`` yields ``m.x``, which
    `resolve` turns into ``m`` when ``x`` is not a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            yield from (f"{base}.{alias.name}" for alias in node.names)


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module of this repository a dotted name lands in, if any."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> Graph:
    """Module -> the modules of this repository it imports. An import of one's
    own parent package is left out: Python runs a package's ``__init__``
    before any of its modules anyway, so that edge says nothing of direction."""
    known = modules()
    graph: Graph = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for imported in imported_names(tree, package):
            target = resolve(imported, known)
            if target and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's
    algorithm, iterative so that a deep chain cannot exhaust the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


class Layers(NamedTuple):
    """An import-linter ``layers`` contract of pyproject.toml."""

    name: str
    layers: list[list[str]]
    """From the top down, each a list of modules."""
    ignored: set[tuple[str, str]]
    """Its ``ignore_imports``: (importer, imported)."""


def layer_contracts() -> list[Layers]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return [
        Layers(
            contract["name"],
            [
                [m.strip().strip("()") for m in layer.replace("|", ":").split(":")]
                for layer in contract["layers"]
            ],
            {
                (rule.split("->")[0].strip(), rule.split("->")[1].strip())
                for rule in contract.get("ignore_imports", [])
            },
        )
        for contract in contracts
        if contract["type"] == "layers"
    ]


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The index (0 at the top) of the layer holding a module: the one
    naming it or its nearest enclosing package."""
    matches = [
        (len(name), number)
        for number, layer in enumerate(layers)
        for name in layer
        if module == name or module.startswith(name + ".")
    ]
    return max(matches)[1] if matches else None


def upward_imports(graph: Graph) -> tuple[list[str], list[str]]:
    """Imports from a module of a lower layer to one of a higher layer: those
    the contracts do not ignore, and those they do."""
    found: tuple[list[str], list[str]] = ([], [])
    for contract in layer_contracts():
        for importer in sorted(graph):
            low = layer_of(importer, contract.layers)
            for imported in sorted(graph[importer]):
                high = layer_of(imported, contract.layers)
                if low is not None and high is not None and low > high:
                    ignored = (importer, imported) in contract.ignored
                    text = f"{importer} -> {imported} ({contract.name})"
                    found[ignored].append(text)
    return found


def package_of(module: str, graph: Graph) -> str:
    is_package = any(other.startswith(module + ".") for other in graph)
    return module if is_package else module.rpartition(".")[0]


# Circles inside one package that are still there, to be broken and never
# joined by another: llm/train.py holds constants its helpers read (SEED_MAX,
# METHODS) and runs those helpers, distributed.py's workers run train_model;
# gguf.py takes the importance matrix imatrix.py collects with gguf's tensor
# names.
KNOWN_CIRCLES_INSIDE_A_PACKAGE = (
    {
        "engine.llm.datasets",
        "engine.llm.distributed",
        "engine.llm.reward_model",
        "engine.llm.rewards",
        "engine.llm.rollouts",
        "engine.llm.train",
    },
    {"engine.export.gguf", "engine.export.imatrix"},
)


def test_no_import_circle_between_files_of_different_packages() -> None:
    graph = import_graph()
    found = circles(graph)
    across = [c for c in found if len({package_of(m, graph) for m in c}) > 1]
    report = "\n".join(f"{len(c)} files: {' <-> '.join(c)}" for c in found)
    print(report)
    assert across == [], f"{len(across)} circles across packages:\n{report}"
    known = KNOWN_CIRCLES_INSIDE_A_PACKAGE
    new = [c for c in found if not any(set(c) <= k for k in known)]
    assert new == [], f"new circles inside a package:\n{report}"


def test_no_import_runs_upward_against_the_layers() -> None:
    found, ignored = upward_imports(import_graph())
    print("\n".join(found + [f"{text}: ignored by the contract" for text in ignored]))
    report = "\n".join(found)
    assert found == [], f"{len(found)} imports run upward:\n{report}"


def test_the_graph_sees_imports_at_any_depth() -> None:
    """The parser itself: a function-local, a relative and a ``from package
    import module`` import each become an edge to the right module."""
    source = (
        "from . import context\n"
        "from engine.store import atomic\n"
        "def f():\n"
        "    from engine.contract import RUN_STATUSES\n"
    )
    names = set(imported_names(ast.parse(source), "engine.jobs"))
    known = modules()
    assert {resolve(n, known) for n in names} == {
        "engine.jobs.context",
        "engine.store.atomic",
        "engine.contract",
    }
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]
    ]
    layers = [["engine.nodes.executor"], ["engine.llm"], ["engine.nodes.registry"]]
    assert layer_of("engine.nodes.registry", layers) == 2
    assert layer_of("engine.llm.train", layers) == 1
    assert layer_of("engine.nodes", layers) is None
