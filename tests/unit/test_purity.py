"""The pure cores import no I/O (STYLE.md, practices 1 and 9): not directly, and not
through another module of services/ either. A regression here is how sans-IO quietly
erodes: one helper that grows a clock or a socket, imported by a core, and the core's
tests need a loop, a disk or a network.

One forbidden-import list for every core; the check follows each core's imports within
``services/`` and fails naming the module, the chain that reached it and the import.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Top-level packages (or dotted prefixes) a pure core must not reach: I/O, threads,
# clocks, processes, the event loop, storage, and the generated protobuf code.
FORBIDDEN = {
    "asyncio",
    "concurrent",
    "ctypes",
    "fcntl",
    "google",
    "grpc",
    "http",
    "lmdb",
    "multiprocessing",
    "os",
    "redis",
    "selectors",
    "services.pb",
    "signal",
    "socket",
    "ssl",
    "subprocess",
    "threading",
    "time",
    "urllib",
    "uvloop",
}

PURE = [
    # listener: the MQTT codec, the session machine, routing, and small parsers
    "services/listener/mqtt",
    "services/listener/session",
    "services/listener/routing",
    "services/listener/systree_topics.py",
    "services/listener/proxy_protocol.py",
    "services/listener/auth/acl.py",
    "services/listener/auth/passwd_file.py",
    "services/listener/auth/errors.py",
    "services/listener/forward/outbox.py",
    "services/listener/forward/inbox.py",
    # gossip: the CRDTs, the metadata store, its record codec, watch buffers
    "services/gossip/crdt",
    "services/gossip/store.py",
    "services/gossip/codec.py",
    "services/gossip/watch.py",
    "services/gossip/engines/base.py",
    "services/gossip/membership",
    "services/gossip/cluster/address_book.py",
    "services/gossip/replication",
    # registry: who leads a client id, the session table
    "services/registry/leadership.py",
    "services/registry/sessions.py",
    "services/registry/quorum",
    "services/registry/engines/base.py",
    # msgstore: the queue model and the code that applies it to an engine
    "services/msgstore/model.py",
    "services/msgstore/queue.py",
    "services/msgstore/keys.py",
    "services/msgstore/ops.py",
    "services/msgstore/wire.py",
    "services/msgstore/tombstones.py",
    "services/msgstore/engines/base.py",
    # shared
    "services/common/session_key.py",
    "services/common/peer/auth.py",
]

STORES = ("gossip", "msgstore", "registry")
SERVICES = ("listener", *STORES)


def _pure_files() -> list[Path]:
    out: list[Path] = []
    for entry in PURE:
        path = ROOT / entry
        out.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return out


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _file_of(module: str) -> Path | None:
    """The source file of a ``services.…`` module (its ``__init__`` for a package)."""
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(path: Path) -> set[str]:
    """Absolute module names ``path`` imports; ``from pkg import sub`` names ``pkg.sub``
    too when ``sub`` is a module of ``services/``."""
    inside = path.is_relative_to(ROOT)
    package = (
        "" if not inside else _module_name(path if path.name == "__init__.py" else path.parent)
    )
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            elif node.module:
                module = node.module
            else:
                continue
            names.add(module)
            for alias in node.names:
                if _file_of(f"{module}.{alias.name}") is not None:
                    names.add(f"{module}.{alias.name}")
    return names


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


@cache
def _violations(module: str) -> tuple[str, ...]:
    """``a -> b imports x, y`` for each impure module reached from ``module`` through
    services/; the walk stops at an impure module, whose own imports say enough."""
    found: list[str] = []
    seen: set[str] = set()

    def walk(mod: str, chain: tuple[str, ...]) -> None:
        if mod in seen:
            return
        seen.add(mod)
        path = _file_of(mod)
        if path is None:
            return
        names = sorted(imported(path))
        bad = [n for n in names if _forbidden(n)]
        if bad:
            found.append(" -> ".join((*chain, mod)) + " imports " + ", ".join(bad))
            return
        for name in names:
            if name == "services" or name.startswith("services."):
                walk(name, (*chain, mod))

    walk(module, ())
    return tuple(found)


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_reaches_no_io(path: Path) -> None:
    assert path.exists(), f"{path} listed as pure but missing"
    bad = _violations(_module_name(path))
    assert not bad, f"{path.relative_to(ROOT)} imports I/O: " + "; ".join(bad)


def test_every_listed_core_exists_and_the_session_has_its_modules() -> None:
    missing = [entry for entry in PURE if not (ROOT / entry).exists()]
    assert not missing, f"listed as pure but missing: {missing}"
    session = {p.name for p in (ROOT / "services/listener/session").glob("*.py")}
    assert session >= {"core.py", "outbound.py", "handle_publish.py"}


def test_checker_sees_direct_and_transitive_forbidden_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom time import monotonic\nimport services.pb.x_pb2\n")
    assert {n for n in imported(bad) if _forbidden(n)} == {"asyncio", "time", "services.pb.x_pb2"}
    # the registry's store reaches protobuf through its records module
    (records,) = _violations("services.registry.records")
    assert records.startswith("services.registry.records imports services.pb")
    (store,) = _violations("services.registry.store")
    assert store.startswith("services.registry.store imports services.pb")
    (committer,) = _violations("services.registry.committer")
    assert committer.startswith("services.registry.committer imports asyncio")


def test_importing_the_pure_cores_loads_no_io_module() -> None:
    """At run time too: the standard library modules the cores use stay quiet."""
    modules = sorted({_module_name(p) for p in _pure_files()})
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(' '.join(sorted(m for m in ('asyncio', 'grpc', 'lmdb', 'socket', 'threading')"
        " if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("service", STORES)
def test_only_the_lmdb_engine_imports_lmdb(service: str) -> None:
    base = ROOT / "services" / service
    users = sorted(
        p.relative_to(base).as_posix()
        for p in base.rglob("*.py")
        if any(n.split(".")[0] == "lmdb" for n in imported(p))
    )
    assert users == ["engines/lmdb_engine.py"]


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_no_other_service(service: str) -> None:
    """Services talk gRPC; sharing code goes through services/common."""
    others = tuple(f"services.{s}" for s in SERVICES if s != service)
    bad = [
        f"{p.relative_to(ROOT)} imports {n}"
        for p in sorted((ROOT / "services" / service).rglob("*.py"))
        for n in imported(p)
        if n.startswith(others)
    ]
    assert not bad
