"""The layout rules of DESIGN §2, each enforced by an AST scan of the source.

Every import counts: module-level, function-local and ``TYPE_CHECKING`` ones,
since a function-local import is still a dependency and a type-only one still
ties the two modules' designs together. The scan reads files, it imports
nothing, so it sees modules that are never loaded in a test run too.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mwportal", "missions", "governance", "workitems", "conversations", "artifacts", "portal", "mwworker")
MAX_LINES = 800

# Apps in layer order: a module may import its own layer or a lower one.
# The project package outside the kernel holds two kinds of module: leaf
# infrastructure (file modes, session store, the Celery app) that any app may
# use and that imports no app, and the wiring (settings, URLs, ASGI/WSGI) that
# sits above every app.
WIRING = frozenset({"mwportal.settings", "mwportal.urls", "mwportal.asgi", "mwportal.wsgi"})
LAYERS = (
    "mwportal.protocol",
    "mwportal",
    "missions",
    "governance",
    "workitems",
    "conversations",
    "artifacts",
    "portal",
    "wiring",
)

# Framework packages the kernel and the Worker must never see.
DJANGO_WORLD = frozenset(
    {"django", "rest_framework", "drf_spectacular", "channels", "channels_redis", "daphne", "celery", "axes"}
)
# The Worker's own third-party dependencies (requirements.txt); anything else
# it imports beyond the stdlib and the kernel is a new dependency to justify.
WORKER_THIRD_PARTY = frozenset({"websockets", "rich", "matplotlib"})


@dataclass(frozen=True, slots=True)
class Import:
    source: str  # importing module
    target: str  # imported name, absolute (a project module or an outside package)
    line: int

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _project_module(name: str) -> str:
    """The project module that ``import name`` loads last (``a.b.f`` -> ``a.b``)."""
    mods = modules()
    while name not in mods and "." in name:
        name = name.rpartition(".")[0]
    return name


@cache
def imports() -> tuple[Import, ...]:
    mods = modules()
    found: list[Import] = []
    for module, path in mods.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from a import b`` imports the module a.b when there is one.
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for name in names:
                target = _project_module(name) if name.split(".")[0] in PACKAGES else name
                found.append(Import(module, target, node.lineno))
    return tuple(found)


def project_imports() -> list[Import]:
    mods = modules()
    return [i for i in imports() if i.target in mods and i.target != i.source]


def layer(module: str) -> str:
    if module == "mwportal.protocol" or module.startswith("mwportal.protocol."):
        return "mwportal.protocol"
    if module in WIRING:
        return "wiring"
    return module.split(".")[0]


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path per strongly connected component (Tarjan), ``a -> b -> a``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges) + 100))
    try:
        for node in sorted(edges):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)

    cycles = []
    for component in components:
        start = min(component)
        # Breadth-first from start back to start inside the component: the shortest cycle through it.
        parents: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in parents:
            following = []
            for node in frontier:
                for nxt in sorted(edges.get(node, set()) & component):
                    if nxt not in parents:
                        parents[nxt] = node
                        following.append(nxt)
            frontier = following
        path = [start]
        node = parents[start]
        while node != start:
            path.append(node)
            node = parents[node]
        path.append(start)
        cycles.append(path[::-1])
    return cycles


def test_find_cycles_reports_the_path_of_each_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(find_cycles(edges)) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}}) == []


def test_it_has_no_import_cycles() -> None:
    """DESIGN §2: no import cycles between the project's modules."""
    edges: dict[str, set[str]] = {}
    lines: dict[tuple[str, str], int] = {}
    for imp in project_imports():
        edges.setdefault(imp.source, set()).add(imp.target)
        lines.setdefault((imp.source, imp.target), imp.line)
    cycles = find_cycles(edges)
    described = [
        " -> ".join(f"{a} (line {lines[a, b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"
        for cycle in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def test_it_keeps_the_layer_order() -> None:
    """DESIGN §2: protocol < missions < governance < workitems < conversations < artifacts < portal;
    a lower app never imports a higher one."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    violations = set()
    where = {}
    for imp in project_imports():
        if layer(imp.source) == "mwworker" or layer(imp.target) == "mwworker":
            continue  # the Worker has its own rule below
        if rank[layer(imp.target)] > rank[layer(imp.source)]:
            violations.add((imp.source, imp.target))
            where.setdefault((imp.source, imp.target), imp.where)
    found = sorted(violations)
    assert not found, "lower layer imports a higher one:\n" + "\n".join(f"{where[v]} imports {v[1]}" for v in found)


def test_it_keeps_the_kernel_django_free() -> None:
    """DESIGN §2: mwportal.protocol imports no Django and no project module outside itself."""
    bad = []
    for imp in imports():
        if layer(imp.source) != "mwportal.protocol":
            continue
        top = imp.target.split(".")[0]
        framework = top in DJANGO_WORLD or top.startswith("django")
        app = top in PACKAGES and layer(imp.target) != "mwportal.protocol"
        if framework or app:
            bad.append(f"{imp.where} imports {imp.target}")
    assert not bad, "\n".join(bad)


def test_it_is_django_free() -> None:
    """DESIGN §2: mwworker imports only the kernel, the stdlib and its own dependencies."""
    bad = []
    for imp in imports():
        if layer(imp.source) != "mwworker":
            continue
        top = imp.target.split(".")[0]
        if top in PACKAGES:
            if layer(imp.target) not in ("mwworker", "mwportal.protocol"):
                bad.append(f"{imp.where} imports {imp.target}")
        elif top not in sys.stdlib_module_names and top not in WORKER_THIRD_PARTY:
            bad.append(f"{imp.where} imports {imp.target}")
    assert not bad, "\n".join(bad)


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_it_keeps_modules_under_800_lines() -> None:
    """DESIGN §2: rooms of a readable size, no module over about 800 lines."""
    over = {
        str(path.relative_to(ROOT)): _line_count(path)
        for path in modules().values()
        if _line_count(path) > MAX_LINES and "migrations" not in path.parts
    }
    assert not over, f"modules over {MAX_LINES} lines: {over}"
