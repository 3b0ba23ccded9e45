"""docs/design.md opens with a map of the code that stays true.

Its module index names every package of ``engine/``, ``studio/`` and
``widgets/`` and every module in them, one line each, and everything it
names exists. Left out: ``__main__.py`` files and the ``__init__.py`` files
that hold only a docstring, imports and ``__all__`` (the package's own line
says what it is for). Pure file reads, no imports of the code.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
CODE_ROOTS = ("engine", "studio", "widgets")
INDEX_HEADING = "## Module index"

PATH = re.compile(r"`((?:engine|studio|widgets|resources|tests|docs)/[^`\s]*)`")
"""A repository path in backquotes (``engine/rl/``, ``engine/cli.py``)."""
ENTRY = re.compile(r"^- `([^`]+)`")
"""An index entry: a bullet whose first backquoted text is what it describes."""


def _only_declares(init: Path) -> bool:
    """Whether a package's ``__init__.py`` holds only a docstring, imports and
    ``__all__``: nothing the package's own line does not already cover."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if targets and all(
            isinstance(t, ast.Name) and t.id == "__all__" for t in targets
        ):
            continue
        return False
    return True


def code_entries() -> set[str]:
    """What the index must name: packages as ``dir/``, modules as files."""
    entries: set[str] = set()
    for root in CODE_ROOTS:
        for path in (ROOT / root).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT).as_posix()
            if path.name == "__init__.py":
                entries.add(path.parent.relative_to(ROOT).as_posix() + "/")
                if _only_declares(path):
                    continue
            elif path.name == "__main__.py":
                continue
            entries.add(rel)
    return entries


def design_text() -> str:
    return DESIGN.read_text(encoding="utf-8")


def index_section(text: str) -> str:
    """The index: from its heading to the next second-level heading."""
    start = text.find(f"\n{INDEX_HEADING}\n")
    assert start >= 0, f"docs/design.md has no '{INDEX_HEADING}' section"
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def index_entries(section: str) -> list[str]:
    return [m.group(1) for line in section.splitlines() if (m := ENTRY.match(line))]


def test_the_design_opens_with_the_index() -> None:
    headings = [line for line in design_text().splitlines() if line.startswith("## ")]
    assert headings and headings[0] == INDEX_HEADING, (
        f"the first section of docs/design.md is {headings[:1]}, not the index"
    )


def test_every_package_and_module_has_one_line() -> None:
    entries = index_entries(index_section(design_text()))
    expected = code_entries()
    missing = sorted(expected - set(entries))
    assert not missing, (
        f"docs/design.md's module index has no line for {missing}: add one "
        "saying what each is for"
    )
    twice = sorted({e for e in entries if entries.count(e) > 1})
    assert not twice, f"the module index describes {twice} more than once"
    assert len(expected) > 150, "the code roots were not found"


def test_each_entry_is_one_line() -> None:
    lines = index_section(design_text()).splitlines()
    wrapped = [
        line
        for line, after in itertools.pairwise(lines)
        if ENTRY.match(line) and after.strip() and not after.startswith(("- ", "#"))
    ]
    assert not wrapped, f"index entries run past one line: {wrapped}"


def test_every_path_the_index_names_exists() -> None:
    section = index_section(design_text())
    named = set(PATH.findall(section)) | set(index_entries(section))
    gone = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert not gone, f"docs/design.md's module index names {gone}, which do not exist"


def _slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_design_points_at_sections_that_exist() -> None:
    """Facts moved out of the design (benchmark figures, the files to
    imitate) are pointed at by anchor; each anchor names a real heading."""
    links = re.findall(r"\]\(([\w.]+\.md)#([\w-]+)\)", design_text())
    assert links, "docs/design.md points at no section of another document"
    broken = []
    for name, anchor in set(links):
        target = DESIGN.parent / name
        headings = (
            line.lstrip("#")
            for line in target.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")
        )
        if anchor not in {_slug(h) for h in headings}:
            broken.append(f"{name}#{anchor}")
    assert not broken, f"docs/design.md links to sections that do not exist: {broken}"
