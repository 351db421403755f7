"""setup.py: a machine that cannot compile C still installs (pure Python), with a warning."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_setup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ternmq_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() itself only runs as __main__
    return module


def test_no_compiler_builds_pure_python_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TERNMQ_COMPILE", raising=False)
    monkeypatch.setenv("CC", "/nonexistent/cc -pthread")
    setup = load_setup()
    assert setup.missing_toolchain() == "no C compiler ('/nonexistent/cc -pthread' not found)"
    assert setup.ext_modules() == []
    assert "no C compiler" in capsys.readouterr().err


def test_no_python_headers_builds_pure_python(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CC", sys.executable)  # something that exists
    paths = dict(sysconfig.get_paths(), include=str(tmp_path))
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
    setup = load_setup()
    assert setup.missing_toolchain() == f"no Python headers (Python.h not in {tmp_path})"
    assert setup.ext_modules() == []


def test_a_present_toolchain_is_not_reported_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        pytest.skip("this Python has no headers")
    monkeypatch.setenv("CC", sys.executable)
    assert load_setup().missing_toolchain() is None


def test_setup_py_without_a_compiler_succeeds_and_builds_nothing(tmp_path: Path) -> None:
    """The real build command, as ``make`` runs it, in a copy of the tree."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "services", tmp_path / "services", ignore=shutil.ignore_patterns("*.so"))
    env = dict(os.environ, CC="/nonexistent/cc")
    env.pop("TERNMQ_COMPILE", None)
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "building pure Python" in done.stderr
    assert not list((tmp_path / "services").rglob("*.so"))
