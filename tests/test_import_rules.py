"""The import rules of docs/design.md that `lint-imports` cannot check.

The layering itself (engine / studio / widgets / Qt) is a set of import-linter
contracts in pyproject.toml, run by `make test`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "stable_baselines3", "trl")


def shared_modules() -> list[str]:
    """The engine modules the GUI may import: those the import-linter contract
    in pyproject.toml lets studio import (the one list of them)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("source_modules") == ["studio"]]
    return sorted(rule.split("->")[1].strip() for rule in contract["ignore_imports"])


def test_the_shared_modules_import_only_the_stdlib_and_each_other() -> None:
    """What `lint-imports` cannot say: a module the GUI shares with the engine
    stays free of third-party packages and of the rest of the engine."""
    shared = shared_modules()
    assert "engine.protocol" in shared
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for module in shared:
        path = ROOT / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
                if node.module == "engine":
                    names = [f"engine.{a.name}" for a in node.names]
            for name in names:
                ok = name.split(".")[0] in stdlib or name in shared
                assert ok, f"{module} imports {name}"


def test_building_the_main_window_leaves_heavy_libraries_unimported(
    tmp_path: Path,
) -> None:
    """Built in a fresh interpreter: the test process itself may have torch."""
    script = f"""
import json, sys
from PySide6.QtWidgets import QApplication
from studio.engine_client import EngineClient
from studio.main_window import MainWindow
from studio.state.project_state import ProjectState
from studio.session import Session
from studio.settings import Settings
app = QApplication([])
session = Session(EngineClient(), ProjectState(), Settings())
window = MainWindow(session, Settings())
window.show()
app.processEvents()
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_engine_serve_starts_without_heavy_imports() -> None:
    script = (
        "import sys, json; import engine.server, engine.cli; engine.cli.build_parser();"
        f"heavy = {HEAVY!r} + ('gymnasium',);"
        "print(json.dumps(sorted(m for m in heavy if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
