"""The session core is pure: no I/O, no clock (STYLE.md §1, §3)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SESSION = Path(__file__).resolve().parents[2] / "services" / "listener" / "session"
FORBIDDEN = {"asyncio", "grpc", "lmdb", "socket", "time", "uvloop", "selectors", "threading"}
MODULES = sorted(SESSION.glob("*.py"))


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def test_there_are_modules_to_check() -> None:
    assert {p.name for p in MODULES} >= {"core.py", "outbound.py", "handle_publish.py"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_imports_nothing_impure(path: Path) -> None:
    assert imported_roots(path) & FORBIDDEN == set()


def test_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom time import monotonic\n")
    assert imported_roots(bad) & FORBIDDEN == {"asyncio", "time"}


def test_importing_the_session_loads_no_io_module() -> None:
    """Transitively too: the codec and messages it uses stay pure."""
    code = (
        "import sys; import services.listener.session.core; "
        "print(' '.join(sorted(m for m in ('asyncio', 'grpc', 'lmdb', 'socket') "
        "if m in sys.modules)))"
    )
    root = str(SESSION.parents[2])
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
