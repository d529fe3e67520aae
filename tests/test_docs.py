"""Every test the documents name exists (issue 18 item 9), and the
conformance map has one row per key word of the specification (issue 19
item 14).

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

The big table of docs/conformance.md has one row per occurrence of MUST or
MUST NOT in ``PROTOCOL.md``, in document order. Each row quotes a few words
around its key word; the quote must sit in the specification exactly where
that occurrence is, under the row's section, and at no other occurrence of
the section, so a missing, duplicated or misplaced row fails. The totals
table is recounted from the rows.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.protocol.bundle import bundle_root

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


CONFORMANCE = ROOT / "docs" / "conformance.md"
KEY_WORD = re.compile(r"\bMUST(?: NOT)?\b")
HEADING = re.compile(r"^#+ +(\d+(?:\.\d+)?)\.? ", re.M)
MAP_ROW = re.compile(
    r"^\| (?P<id>P-(?P<section>\d+(?:\.\d+)?)-\d\d[a-e]?) \| [^|]* \| \"(?P<quote>[^\"|]+)\" "
    r"\| [^|]* \| [^|]* \| (?P<status>[^|]*) \|$",
    re.M,
)
STATUSES = ("proven", "partly", "not yet", "no test needed")
TOTALS_ROW = re.compile(r"^\| (?P<section>\d+|all) \| [^|]* \|" + r" (\d+) \|" * 7 + "$", re.M)
TOTALS_LINE = re.compile(
    r"\*\*Totals: (\d+) rows \((\d+) MUST, (\d+) MUST NOT\); "
    r"(\d+) proven, (\d+) partly, (\d+) not yet, (\d+) needing no test\.\*\*"
)
QUOTE_WORDS = 8


class Row(NamedTuple):
    id: str
    section: str
    quote: str
    status: str


class KeyWord(NamedTuple):
    section: str
    text: str
    at: int
    word: str


def map_rows(text: str) -> list[Row]:
    """The rows of the map, in order."""
    return [Row(m["id"], m["section"], m["quote"], m["status"]) for m in MAP_ROW.finditer(text)]


def key_words(spec: str) -> list[KeyWord]:
    """Every MUST and MUST NOT of ``spec`` in order, with its section ("0" before the
    first numbered heading) and the section's text with whitespace collapsed, so a
    key word wrapped over a line break is one occurrence."""
    bounds = [(0, "0"), *((m.start(), m[1]) for m in HEADING.finditer(spec)), (len(spec), "")]
    found = []
    for (start, section), (end, _) in pairwise(bounds):
        text = " ".join(spec[start:end].split())
        found += [KeyWord(section, text, m.start(), m[0]) for m in KEY_WORD.finditer(text)]
    return found


def quoted_at(quote: str, key: KeyWord) -> bool:
    """Whether ``quote`` stands in the specification with its first key word on ``key``."""
    anchor = KEY_WORD.search(quote)
    if anchor is None or anchor[0] != key.word:
        return False
    start = key.at - anchor.start()
    return start >= 0 and key.text[start : start + len(quote)] == quote


def misplaced(rows: list[Row], keys: list[KeyWord]) -> list[str]:
    """Why the rows are not one per key word in document order, or nothing."""
    why = []
    for number, (row, key) in enumerate(zip(rows, keys, strict=False), 1):
        where = f"row {number} {row.id}"
        if row.section != key.section:
            why.append(f"{where}: section {row.section}, the key word {number} is in {key.section}")
        elif not quoted_at(row.quote, key):
            why.append(f"{where}: {row.quote!r} is not where the key word {number} stands")
        elif others := [k for k in keys if k is not key and k.section == key.section and quoted_at(row.quote, k)]:
            why.append(f"{where}: {row.quote!r} also stands at {len(others)} other key word(s) of {key.section}")
        if len(row.quote.split()) > QUOTE_WORDS:
            why.append(f"{where}: quotes more than {QUOTE_WORDS} words")
        if why:
            break
    if not why and len(rows) != len(keys):
        why.append(f"{len(rows)} rows for {len(keys)} key words")
    return why


def status_of(row: Row) -> str:
    return next((s for s in STATUSES if row.status.startswith(s)), f"unknown: {row.status}")


def totals(rows: list[Row]) -> dict[str, tuple[int, ...]]:
    """Per top-level section and for "all": rows, MUST, MUST NOT, then one count per status."""
    counts: dict[str, Counter[str]] = {}
    for row in rows:
        anchor = KEY_WORD.search(row.quote)
        for section in (row.section.split(".")[0], "all"):
            counts.setdefault(section, Counter()).update(
                ["rows", anchor[0] if anchor else "no key word", status_of(row)]
            )
    return {s: (c["rows"], c["MUST"], c["MUST NOT"], *(c[status] for status in STATUSES)) for s, c in counts.items()}


@functools.cache
def specification() -> str:
    path = bundle_root() / "spec" / "PROTOCOL.md"
    if not path.is_file():
        pytest.skip(f"no {path} (set MWP_PROTOCOL_ROOT)")
    return path.read_text()


def test_the_map_has_one_row_per_must_and_must_not_in_document_order() -> None:
    rows, keys = map_rows(CONFORMANCE.read_text()), key_words(specification())
    assert misplaced(rows, keys) == []
    ordinals = [(row.section, int(row.id.rstrip("abcde").rsplit("-", 1)[1]), row.id[-1]) for row in rows]
    assert all(a < b for a, b in pairwise(ordinals) if a[0] == b[0]), "IDs out of order within a section"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda rows: rows[:40] + rows[41:], id="a row missing"),
        pytest.param(lambda rows: rows[:41] + rows[40:], id="a row twice"),
        pytest.param(lambda rows: rows[:40] + [rows[41], rows[40]] + rows[42:], id="two rows swapped"),
        pytest.param(lambda rows: rows[:-1], id="the last row missing"),
        pytest.param(lambda rows: [*rows, rows[-1]], id="the last row twice"),
    ],
)
def test_it_refuses_a_map_with_a_row_missing_duplicated_or_out_of_order(
    change: Callable[[list[Row]], list[Row]],
) -> None:
    rows, keys = map_rows(CONFORMANCE.read_text()), key_words(specification())
    assert rows[40].section == rows[41].section
    assert misplaced(change(rows), keys) != []


def test_it_matches_rows_to_key_words_by_section_and_position() -> None:
    spec = (
        "# Title\n\nThe key words **MUST** are defined.\n\n## 1. One\n\nA client MUST send it. A server\n"
        "MUST NOT drop it, and MUST send it.\n\n### 1.1 Sub\n\nA client MUST send it.\n"
    )
    keys = key_words(spec)
    assert [(k.section, k.word) for k in keys] == [
        ("0", "MUST"),
        ("1", "MUST"),
        ("1", "MUST NOT"),
        ("1", "MUST"),
        ("1.1", "MUST"),
    ]
    good = [
        Row("P-0-01", "0", "words **MUST** are", "no test needed"),
        Row("P-1-01", "1", "client MUST send it", "proven"),
        Row("P-1-02a", "1", "server MUST NOT drop", "partly"),
        Row("P-1-02b", "1", "and MUST send", "not yet"),
        Row("P-1.1-01", "1.1", "client MUST send", "proven"),
    ]
    assert misplaced(good, keys) == []
    assert misplaced([*good[:1], Row("P-1-01", "1", "MUST send it", "proven"), *good[2:]], keys) == [
        "row 2 P-1-01: 'MUST send it' also stands at 1 other key word(s) of 1"
    ]
    assert misplaced([*good[:4], Row("P-1.1-01", "1", "client MUST send", "proven")], keys) == [
        "row 5 P-1.1-01: section 1, the key word 5 is in 1.1"
    ]
    assert misplaced([*good[:2], good[3], good[2], good[4]], keys) == [
        "row 3 P-1-02b: 'and MUST send' is not where the key word 3 stands"
    ]
    assert misplaced(good[:4], keys) == ["4 rows for 5 key words"]
    too_long = Row("P-1.1-01", "1.1", "A client MUST send it and much more here", "proven")
    assert "row 5 P-1.1-01: quotes more than 8 words" in misplaced([*good[:4], too_long], keys)
    assert totals(good)["all"] == (5, 4, 1, 2, 1, 1, 1)


def test_the_totals_are_counted_from_the_rows() -> None:
    text = CONFORMANCE.read_text()
    rows = map_rows(text)
    assert all(status_of(row) in STATUSES for row in rows), [row.id for row in rows if status_of(row) not in STATUSES]
    table = {m["section"]: tuple(int(n) for n in m.groups()[1:]) for m in TOTALS_ROW.finditer(text)}
    assert table == totals(rows)
    line = TOTALS_LINE.search(text)
    assert line is not None
    rows_, must, must_not, *statuses = table["all"]
    assert tuple(int(n) for n in line.groups()) == (rows_, must, must_not, *statuses)
