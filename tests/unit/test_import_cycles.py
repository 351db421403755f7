"""No import cycles in ``services/``, and ``services/common/`` depends on no service.

A cycle makes a module's meaning depend on which module of the loop was imported first,
and it welds the loop's modules into one unit that cannot be tested, split or replaced
alone. The one cycle by design is the session's handler table: ``session/core.py``
dispatches to one ``handle_*`` module per packet type, and those handlers call back into
the core (and ``ending``), as mosquitto's ``handle_*.c`` do.

The graph is read from the source (AST), not from ``sys.modules``: every ``import`` and
``from`` counts, at module level, inside functions and under ``TYPE_CHECKING``, because
each one is a dependency someone has to follow when reading or moving the code.
"""

from __future__ import annotations

import ast
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SESSION = "services.listener.session"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # "path:line" of the import statement


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path, package: str = "services") -> dict[str, Path]:
    """Every module of ``package`` under ``root`` by dotted name; the generated protobuf
    modules (``services/pb``) are left out: they import only each other and protobuf."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        name = module_name(path, root)
        if name == f"{package}.pb" or name.startswith(f"{package}.pb."):
            continue
        found[name] = path
    return found


def _base(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` statement names (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, node.module] if node.module else package)


def imports(module: str, path: Path, known: Container[str]) -> Iterable[tuple[str, int]]:
    """Each module of ``known`` that ``path`` imports, with the line: ``from a import b``
    names ``a.b`` when that is a module, else ``a``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                while parts and ".".join(parts) not in known:
                    parts.pop()
                if parts:
                    yield ".".join(parts), node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, path, node)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    yield target, node.lineno
                elif base in known:
                    yield base, node.lineno


def graph(root: Path, package: str = "services") -> list[Edge]:
    """The import edges between the modules of ``package``, one per pair (the first line
    that makes it)."""
    known = modules(root, package)
    edges: dict[tuple[str, str], Edge] = {}
    for module, path in known.items():
        rel = path.relative_to(root).as_posix()
        for target, line in sorted(imports(module, path, known), key=lambda t: t[1]):
            if target != module:
                edges.setdefault((module, target), Edge(module, target, f"{rel}:{line}"))
    return list(edges.values())


def components(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm,
    iterative: the graph is deep enough to worry the recursion limit)."""
    succ: dict[str, list[str]] = {}
    for e in edges:
        succ.setdefault(e.source, []).append(e.target)
        succ.setdefault(e.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(succ):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                scc = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    scc.append(w)
                    if w == v:
                        break
                if len(scc) > 1:
                    found.append(sorted(scc))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(found)


def by_design(component: list[str]) -> bool:
    """The session handler table: ``core`` with its ``handle_*`` modules and ``ending``."""
    return all(
        m in (f"{SESSION}.core", f"{SESSION}.ending") or m.startswith(f"{SESSION}.handle_")
        for m in component
    )


def describe(component: list[str], edges: list[Edge]) -> str:
    inside = set(component)
    lines = [f"cycle of {len(component)} modules: {', '.join(component)}"]
    lines += [
        f"    {e.source} -> {e.target}  ({e.where})"
        for e in sorted(edges, key=lambda e: (e.source, e.target))
        if e.source in inside and e.target in inside
    ]
    return "\n".join(lines)


def test_no_import_cycle_in_services() -> None:
    edges = graph(ROOT)
    cycles = [c for c in components(edges) if not by_design(c)]
    assert not cycles, "import cycles in services/:\n" + "\n".join(
        describe(c, edges) for c in cycles
    )


def test_common_imports_no_service() -> None:
    """``services/common`` is what every service shares; a service it imported would
    drag that service (and everything it imports) into every other one."""
    own = ("services.common", "services.pb")
    bad = [
        f"{e.where} imports {e.target}"
        for e in graph(ROOT)
        if e.source.startswith("services.common")
        and not any(e.target == p or e.target.startswith(p + ".") for p in own)
        and e.target != "services"
    ]
    assert not bad, "services/common imports a service:\n" + "\n".join(bad)


def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_walk_sees_function_level_relative_and_type_checking_imports(
    tmp_path: Path,
) -> None:
    _plant(
        tmp_path,
        {
            "services/__init__.py": "",
            "services/a/__init__.py": "",
            "services/a/x.py": "def f():\n    from . import y\n",
            "services/a/y.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from services.a.z import Z\n",
            "services/a/z.py": "from .x import f\n",
            "services/a/free.py": "import services.a.x\n",
            "services/pb/__init__.py": "",
            "services/pb/p.py": "from services.pb import q\n",
            "services/pb/q.py": "from services.pb import p\n",
        },
    )
    edges = graph(tmp_path)
    assert components(edges) == [["services.a.x", "services.a.y", "services.a.z"]]
    assert "services.a.x -> services.a.y  (services/a/x.py:2)" in describe(
        components(edges)[0], edges
    )


def test_the_handler_table_is_the_only_cycle_allowed() -> None:
    assert by_design([f"{SESSION}.core", f"{SESSION}.handle_publish", f"{SESSION}.ending"])
    assert by_design([f"{SESSION}.core", f"{SESSION}.handle_connect"])
    assert not by_design([f"{SESSION}.core", f"{SESSION}.machine"])
    assert not by_design([f"{SESSION}.core", "services.listener.broker"])
