"""The import rules of DESIGN.md, checked on the source."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QT = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "shiboken6")
HEAVY = ("torch", "transformers", "stable_baselines3", "trl")


def imports_of(package: str) -> list[tuple[Path, int, str]]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(path, node.lineno, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.lineno, node.module))
                found += [
                    (path, node.lineno, f"{node.module}.{a.name}") for a in node.names
                ]
    return found


def top(name: str) -> str:
    return name.split(".")[0]


def test_engine_imports_no_qt_and_nothing_of_the_gui() -> None:
    bad = [
        (p.relative_to(ROOT), line, name)
        for p, line, name in imports_of("engine")
        if top(name) in ("studio", "widgets", *QT)
    ]
    assert bad == []


def test_widgets_import_neither_studio_nor_engine() -> None:
    bad = [
        (p.relative_to(ROOT), line, name)
        for p, line, name in imports_of("widgets")
        if top(name) in ("studio", "engine")
    ]
    assert bad == []


def test_studio_imports_only_protocol_and_flow_from_engine() -> None:
    allowed = {"engine.protocol", "engine.flow", "engine.untrusted"}
    bad = [
        (p.relative_to(ROOT), line, name)
        for p, line, name in imports_of("studio")
        if top(name) == "engine"
        and name != "engine"
        and not any(name == a or name.startswith(a + ".") for a in allowed)
        # `from engine import protocol` appears as engine.protocol: allowed
    ]
    assert bad == []


def test_studio_models_know_nothing_of_qt() -> None:
    bad = [
        (p.relative_to(ROOT), line, name)
        for p, line, name in imports_of("studio/models")
        if top(name) in QT
    ]
    assert bad == []


def test_protocol_and_flow_are_stdlib_only() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__", "engine"}
    for module in ("protocol.py", "flow.py", "untrusted.py"):
        path = ROOT / "engine" / module
        if not path.exists():
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert top(name) in stdlib, f"{module} imports {name}"


def test_building_the_main_window_leaves_heavy_libraries_unimported(
    tmp_path: Path,
) -> None:
    """Built in a fresh interpreter: the test process itself may have torch."""
    script = f"""
import json, sys
from PySide6.QtWidgets import QApplication
from studio.engine_client import EngineClient
from studio.main_window import MainWindow
from studio.models.project_state import ProjectState
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
