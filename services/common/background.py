"""Tasks a service starts and nobody awaits: kept referenced, crashes logged, cancelled
together at shutdown.

Why: an unreferenced task may be collected mid-flight, and an exception in a task that
no one awaits is otherwise lost (or surfaces as "never retrieved" at exit). Every such
task's end with an exception is a bug and is logged as ``internal.error``.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Coroutine
from typing import Any

from services.common import log


def report_crash(task: asyncio.Task[Any]) -> None:
    """A background task that ends with an exception is a bug: log it where operators look."""
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    detail = "".join(traceback.format_exception(exc))
    log.emit("internal.error", "error", op=task.get_name(), reason=detail)


class Background:
    """The background tasks of one component."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(report_crash)
        return task

    async def close(self) -> None:
        """Cancel every task still running and wait for them to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
