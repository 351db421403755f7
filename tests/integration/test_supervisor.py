"""The generic supervisor with small Python children: crash-loop limit, stop order, and
children that die with it. The node's use of it is tested in test_node and tests/fault."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from services.common.child_process import SUPERVISED
from services.common.supervisor import ChildSpec, RestartPolicy, Supervisor
from tests.support.node import wait_for

pytestmark = pytest.mark.integration

POLICY = RestartPolicy(max_restarts=2, restart_window=60.0, shutdown_timeout=5.0)

# Says it is ready, then on SIGTERM writes its name to the log and exits.
_POLITE = textwrap.dedent(
    """
    import signal, sys, time
    name, log = sys.argv[1], sys.argv[2]
    def bye(*_):
        with open(log, "a") as f:
            f.write(name + "\\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    with open(log + "." + name, "w") as f:
        f.write("ready")
    while True:
        time.sleep(1)
    """
)


def test_a_crash_loop_stops_the_supervisor_with_status_1(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    code = f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"
    sup = Supervisor([ChildSpec("crasher", (sys.executable, "-c", code))], POLICY)

    async def run() -> int:
        return await asyncio.wait_for(sup.run(asyncio.Event()), 30)

    assert asyncio.run(run()) == 1
    assert starts.read_text() == "xxx"  # the first start and max_restarts restarts
    assert sup.status()["crasher"]["restarts"] == 3


def test_children_stop_in_reverse_order(tmp_path: Path) -> None:
    log = tmp_path / "stopped"
    names = ["first", "second", "third"]
    sup = Supervisor(
        [ChildSpec(n, (sys.executable, "-c", _POLITE, n, str(log))) for n in names], POLICY
    )

    async def run() -> int:
        stop = asyncio.Event()
        task = asyncio.create_task(sup.run(stop))
        for n in names:
            while not Path(f"{log}.{n}").exists():
                await asyncio.sleep(0.02)
        assert all(s["running"] for s in sup.status().values())
        stop.set()
        return await asyncio.wait_for(task, 30)

    assert asyncio.run(run()) == 0
    assert log.read_text().split() == ["third", "second", "first"]
    assert not any(s["running"] for s in sup.status().values())


def test_children_die_with_a_supervisor_killed_hard(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        from services.common.supervisor import ChildSpec, RestartPolicy, Supervisor
        code = (
            "from services.common.child_process import adopt_supervision; "
            "assert adopt_supervision(); import time; time.sleep(60)"
        )
        child = (sys.executable, "-c", code)
        sup = Supervisor([ChildSpec("sleeper", child)], RestartPolicy(1, 60.0, 5.0))
        async def main():
            task = asyncio.create_task(sup.run(asyncio.Event()))
            await asyncio.sleep(0.5)
            print(sup.status()["sleeper"]["pid"], flush=True)
            await task
        asyncio.run(main())
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        wait_for(lambda: not _alive(child), 10, what="the child gone with its supervisor")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


_ADOPT = textwrap.dedent(
    """
    import signal, subprocess, sys
    from services.common.child_process import adopt_supervision
    print(adopt_supervision(), signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True)
    # what it starts begins with SIGINT ignored, with no window to be killed in
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    print(subprocess.run([sys.executable, "-c", probe], capture_output=True,
                         text=True).stdout.strip(), flush=True)
    """
)


def test_a_supervised_child_ignores_sigint_and_so_does_what_it_starts() -> None:
    env = {**os.environ, SUPERVISED: str(os.getpid())}
    out = subprocess.run(
        [sys.executable, "-c", _ADOPT], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True"]


def test_a_child_alone_keeps_its_sigint() -> None:
    env = {k: v for k, v in os.environ.items() if k != SUPERVISED}
    out = subprocess.run(
        [sys.executable, "-c", _ADOPT], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "False"]


def test_a_child_whose_supervisor_died_before_it_started_dies_at_once() -> None:
    # Its parent is this test, not the pid it was told: as if the supervisor had died
    # and the child had been handed to another parent before it could ask to die with it.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env = {**os.environ, SUPERVISED: str(gone.pid)}
    out = subprocess.run(
        [sys.executable, "-c", _ADOPT], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == -signal.SIGKILL
    assert out.stdout == ""
