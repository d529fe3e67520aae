"""Every test the documents name exists (issue 18 item 9).

docs/conformance.md proves each protocol rule by naming a test as
``tests/path.py::name``; README.md and the other documents name tests and
test modules the same way. A renamed or deleted test leaves such a citation
pointing at nothing (issue 18 found one), so this reads every reference and
resolves it in the test sources by their syntax tree, without importing
them:

- ``tests/path.py`` (or ``tests/dir/``) must exist;
- ``tests/path.py::name`` a function, class or assigned name of that module;
- ``tests/path.py::Class::name`` a method of that class (or of a base class
  defined in the same module);
- a parametrized id ``::test_x[a-b]`` names ``test_x``.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REFERENCE = re.compile(r"tests/(?:[\w.-]+/)*(?:[\w.-]+\.py(?:::\w+)*(?:\[[^\]\s`]*\])?)?")


def references(text: str) -> list[str]:
    """The ``tests/...`` references of ``text``, in order, parametrize ids dropped."""
    return [re.sub(r"\[[^\]]*\]$", "", match.group(0)) for match in REFERENCE.finditer(text)]


@functools.cache
def module_names(path: Path) -> dict[str, ast.ClassDef | None]:
    """The top-level names of a test module: classes map to their node, the rest to None."""
    tree = ast.parse(path.read_text(), str(path))
    names: dict[str, ast.ClassDef | None] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update((t.id, None) for t in targets if isinstance(t, ast.Name))
    return names


def class_members(names: dict[str, ast.ClassDef | None], cls: ast.ClassDef) -> set[str]:
    """What ``cls`` defines, with what its bases defined in the same module define."""
    members = {
        node.name for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    for base in cls.bases:
        parent = names.get(base.id) if isinstance(base, ast.Name) else None
        if parent is not None and parent is not cls:
            members |= class_members(names, parent)
    return members


def problem(reference: str) -> str | None:
    """Why ``reference`` names nothing, or None when it resolves."""
    path_text, *parts = reference.split("::")
    path = ROOT / path_text
    if path_text.endswith("/"):
        return None if path.is_dir() else "no such directory"
    if not path.is_file():
        return "no such file"
    if not parts:
        return None
    names = module_names(path)
    if parts[0] not in names:
        return f"{path_text} defines no {parts[0]}"
    owner = names[parts[0]]
    for part in parts[1:]:
        if owner is None or part not in class_members(names, owner):
            return f"{parts[0]} has no {part}"
        owner = next(
            (n for n in owner.body if isinstance(n, ast.ClassDef) and n.name == part),
            None,
        )
    return None


def stale(document: Path) -> list[str]:
    """``file:line: reference: why`` for each reference of ``document`` that names nothing."""
    return [
        f"{document.relative_to(ROOT)}:{number}: {reference}: {why}"
        for number, line in enumerate(document.read_text().splitlines(), 1)
        for reference in references(line)
        if (why := problem(reference)) is not None
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_it_finds_every_test_a_document_names(document: Path) -> None:
    assert stale(document) == []


def test_it_reads_the_conformance_map_s_citations() -> None:
    cited = references((ROOT / "docs" / "conformance.md").read_text())
    # The map cites hundreds of tests by name; a pattern that stopped
    # matching them would make the check above pass on nothing.
    assert sum("::" in reference for reference in cited) > 100


def test_it_resolves_functions_methods_and_parametrized_ids_and_refuses_the_rest() -> None:
    here = "tests/test_docs.py"
    text = (
        f"`{here}::test_it_finds_every_test_a_document_names[README.md]`, `{here}`, `tests/`, "
        "`tests/core/test_key_registry.py::ValidityHistoryProperties::test_history_is_append_only_and_earliest_wins_PROTOCOL_6_4`"
    )
    assert [problem(r) for r in references(text)] == [None, None, None, None]
    assert problem(f"{here}::test_it_is_not_here") == f"{here} defines no test_it_is_not_here"
    assert problem(f"{here}::problem::inner") == "problem has no inner"
    assert problem("tests/core/test_key_registry.py::ValidityHistoryProperties::test_nothing") == (
        "ValidityHistoryProperties has no test_nothing"
    )
    assert problem("tests/no_such_module.py") == "no such file"
    assert problem("tests/no_such_dir/") == "no such directory"
