"""The one error the auth files raise: every problem of a file, each with its line.

Like the config parser, the password and ACL parsers collect *all* problems before
failing, so an operator fixes a file in one pass. Line 0 means "the whole file"
(unreadable, missing). Errors of several files combine by concatenating problems.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileProblem:
    source: str
    line: int
    reason: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.reason}"


class AuthFileError(Exception):
    """A password or ACL file cannot be used; ``problems`` says where and why."""

    def __init__(self, problems: Iterable[FileProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
