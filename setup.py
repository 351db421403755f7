"""Build: the listener's per-message path (and the registry's connect path) is compiled
to C with mypyc.

Why: on a slow 2-core machine the listener is interpreter-bound (a flat profile across
the codec, the session machine, routing and the connection glue), and mypyc turns the
same type-annotated modules into C extensions without a second source. What is compiled
is listed in ``pyproject.toml`` under ``[tool.ternmq.compile]``; everything else stays
plain Python. ``TERNMQ_COMPILE=0`` builds pure Python (same behaviour, slower), and so
does a machine without a C compiler, Python's headers or mypyc, with a warning.

An editable install (``make install``) puts the extensions beside the sources, where
they take precedence over the ``.py`` files: ``make`` rebuilds them whenever a compiled
source changes.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import sys
import sysconfig
import tomllib

from setuptools import setup


def compiled_sources() -> list[str]:
    with open("pyproject.toml", "rb") as f:
        patterns = tomllib.load(f)["tool"]["ternmq"]["compile"]["modules"]
    # package __init__ modules stay Python: mypyc derives a compiled package's __path__
    # from where the group's shared library lies, which is not the package root here
    paths = {path for pattern in patterns for path in glob.glob(pattern)}
    return sorted(p for p in paths if os.path.basename(p) != "__init__.py")


def missing_toolchain() -> str | None:
    """Why this machine cannot build C extensions, or None.

    Checked up front so that ``make run`` on a machine without a compiler or Python's
    headers runs the plain sources, as the README promises; a compiler that is there and
    fails still fails the build (a compile error must not pass for a missing compiler).
    """
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(cc)
    if not words or shutil.which(words[0]) is None:
        return f"no C compiler ({cc!r} not found)"
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"no Python headers (Python.h not in {include})"
    return None


def ext_modules() -> list[object]:
    if os.environ.get("TERNMQ_COMPILE", "1") == "0":
        return []
    missing = missing_toolchain()
    if missing is not None:
        print(f"ternmq: {missing}, building pure Python (slower)", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("ternmq: mypyc not found, building pure Python", file=sys.stderr)
        return []
    # one shared library for the group, inside the package (an editable install only
    # maps ``services``: a top-level library would not be importable)
    return list(mypycify(compiled_sources(), group_name="services._compiled"))


if __name__ == "__main__":
    setup(ext_modules=ext_modules())
