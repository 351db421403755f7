"""The pure cores import no I/O (STYLE.md, practice 1): codec, session, routing, CRDTs,
queue and registry logic. A regression here is how sans-IO quietly erodes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "asyncio",
    "grpc",
    "lmdb",
    "socket",
    "time",
    "uvloop",
    "redis",
    "threading",
    "subprocess",
    "selectors",
}
PURE = [
    "services/listener/mqtt",
    "services/listener/session",
    "services/listener/routing",
    "services/listener/systree_topics.py",
    "services/listener/proxy_protocol.py",
    "services/gossip/crdt",
    "services/msgstore/queue.py",
    "services/msgstore/keys.py",
    "services/msgstore/ops.py",
    "services/msgstore/model.py",
    "services/msgstore/engines/base.py",
    "services/gossip/store.py",
    "services/gossip/codec.py",
    "services/gossip/watch.py",
    "services/listener/auth/acl.py",
    "services/listener/auth/passwd_file.py",
    "services/listener/auth/errors.py",
    "services/registry/leadership.py",
    "services/registry/sessions.py",
]


def _modules() -> list[Path]:
    out: list[Path] = []
    for entry in PURE:
        path = ROOT / entry
        out.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return out


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_io(path: Path) -> None:
    assert path.exists(), f"{path} listed as pure but missing"
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] in FORBIDDEN
        ):
            bad.append(node.module)
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
