"""The gossip core stays pure: no I/O, no clock, and only one module touches LMDB."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "services" / "gossip"
PURE = [
    *sorted((ROOT / "crdt").glob("*.py")),
    ROOT / "store.py",
    ROOT / "codec.py",
    ROOT / "watch.py",
]
FORBIDDEN = {"asyncio", "grpc", "lmdb", "socket", "time", "threading", "os", "uvloop"}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_modules_import_no_io(path: Path) -> None:
    bad = {n for n in imported(path) if n.split(".")[0] in FORBIDDEN}
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_only_the_engine_imports_lmdb_and_nothing_imports_msgstore() -> None:
    users = []
    for path in ROOT.rglob("*.py"):
        names = imported(path)
        if any(n.split(".")[0] == "lmdb" for n in names):
            users.append(path.relative_to(ROOT).as_posix())
        assert not any(n.startswith("services.msgstore") for n in names), path
    assert users == ["engines/lmdb_engine.py"]
