"""Rooms a newcomer can hold in their head (issue 28): no class over 600
lines and no function over 100 in engine/, studio/ and widgets/, measured
from the code."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASS_LINES_MAX = 600
FUNCTION_LINES_MAX = 100


def sizes() -> tuple[list[str], list[str]]:
    """The classes and the functions over their bounds, ``path:name (n)``."""
    classes, functions = [], []
    for top in ("engine", "studio", "widgets"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(
                    node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
                ):
                    continue
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                where = f"{path.relative_to(ROOT)}:{node.name} ({lines})"
                if isinstance(node, ast.ClassDef) and lines > CLASS_LINES_MAX:
                    classes.append(where)
                elif not isinstance(node, ast.ClassDef) and lines > FUNCTION_LINES_MAX:
                    functions.append(where)
    return classes, functions


def test_no_class_over_600_lines_and_no_function_over_100() -> None:
    classes, functions = sizes()
    assert classes == [], f"classes over {CLASS_LINES_MAX} lines: {classes}"
    assert functions == [], f"functions over {FUNCTION_LINES_MAX} lines: {functions}"
