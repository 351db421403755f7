"""The password file: ``username:hash`` lines, as vmq-passwd and mosquitto_passwd write them.

Theory of operation: a file is a sequence of lines, each either an entry
(``john:$argon2id$v=19$...``, split at the *first* colon, so usernames never contain
one) or text kept verbatim (blank lines and ``#`` comments), so rewriting a file with
``ternmq-passwd`` changes only the entry it touches. Parsing checks every line and
reports all problems with their line numbers: a hash of no accepted scheme (see
``hashing``), an empty or duplicated username. Parsing is pure; reading and writing
the file is the caller's job.

``-U`` input is different: ``username:plaintext`` lines. ``upgrade_plaintext`` hashes
each one, but keeps a line whose value already is a well-formed hash, so running ``-U``
twice does not destroy a file (vmq-passwd would hash the hashes).

Worked example::

    f = parse_passwd("# ops\\nann:$6$c2FsdA==$...\\n", "pw")
    f.with_user("bob", h).without_user("ann").render() == "# ops\\nbob:" + h + "\\n"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import AuthFileError, FileProblem
from .hashing import is_hash, scheme_of


@dataclass(frozen=True, slots=True)
class PasswdEntry:
    username: str
    hash: str


Line = PasswdEntry | str


def check_username(username: str) -> str | None:
    """Why ``username`` cannot be stored in a password file, or None if it can."""
    if not username:
        return "empty username"
    if ":" in username:
        return "username contains ':'"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in username):
        return "username contains a control character"
    try:
        size = len(username.encode("utf-8"))
    except UnicodeEncodeError:
        return "username is not valid UTF-8"
    if size > 65535:
        return "username longer than 65535 bytes"
    return None


@dataclass(frozen=True, slots=True)
class PasswdFile:
    """An immutable password file; edits return a new one."""

    lines: tuple[Line, ...] = ()

    def entries(self) -> dict[str, str]:
        """username -> stored hash."""
        return {ln.username: ln.hash for ln in self.lines if isinstance(ln, PasswdEntry)}

    def __contains__(self, username: object) -> bool:
        return any(isinstance(ln, PasswdEntry) and ln.username == username for ln in self.lines)

    def with_user(self, username: str, stored_hash: str) -> PasswdFile:
        """Replace ``username``'s entry where it stands, or append one."""
        reason = check_username(username)
        if reason:
            raise ValueError(reason)
        new = PasswdEntry(username, stored_hash)
        if username in self:
            return PasswdFile(
                tuple(
                    new if isinstance(ln, PasswdEntry) and ln.username == username else ln
                    for ln in self.lines
                )
            )
        return PasswdFile((*self.lines, new))

    def without_user(self, username: str) -> PasswdFile:
        """The file without ``username``; KeyError if it has no such entry."""
        if username not in self:
            raise KeyError(username)
        return PasswdFile(
            tuple(
                ln
                for ln in self.lines
                if not (isinstance(ln, PasswdEntry) and ln.username == username)
            )
        )

    def render(self) -> str:
        out = [
            f"{ln.username}:{ln.hash}" if isinstance(ln, PasswdEntry) else ln for ln in self.lines
        ]
        return "".join(line + "\n" for line in out)


def _is_kept(raw: str) -> bool:
    return not raw.strip() or raw.lstrip().startswith("#")


def _scan(text: str, source: str) -> tuple[list[tuple[int, str | PasswdEntry]], list[FileProblem]]:
    """Split lines into kept text and (not yet checked) entries; report syntax problems.

    An entry's ``hash`` field holds the raw value after the first colon here.
    """
    problems: list[FileProblem] = []
    out: list[tuple[int, str | PasswdEntry]] = []
    first_seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        if _is_kept(raw):
            out.append((lineno, raw))
            continue
        username, colon, value = raw.partition(":")
        reason = "expected username:password" if not colon else check_username(username)
        if reason is None and username in first_seen:
            reason = f"user {username!r} already on line {first_seen[username]}"
        if reason is None and not value:
            reason = f"user {username!r}: empty password"
        if reason is not None:
            problems.append(FileProblem(source, lineno, reason))
            continue
        first_seen[username] = lineno
        out.append((lineno, PasswdEntry(username, value)))
    return out, problems


def parse_passwd(text: str, source: str) -> PasswdFile:
    """Parse a password file; AuthFileError listing every bad line."""
    scanned, problems = _scan(text, source)
    for lineno, ln in scanned:
        if isinstance(ln, PasswdEntry):
            try:
                scheme_of(ln.hash)
            except ValueError as e:
                problems.append(FileProblem(source, lineno, f"user {ln.username!r}: {e}"))
    if problems:
        raise AuthFileError(sorted(problems, key=lambda p: p.line))
    return PasswdFile(tuple(ln for _, ln in scanned))


def upgrade_plaintext(
    text: str, source: str, hash_fn: Callable[[bytes], str]
) -> tuple[PasswdFile, int]:
    """Hash every ``username:plaintext`` line; returns the file and how many were hashed.

    A value that already is a well-formed hash is kept as it is. The password is the
    whole rest of the line after the first colon (trailing spaces included). Nothing is
    hashed unless every line is valid.
    """
    scanned, problems = _scan(text, source)
    if problems:
        raise AuthFileError(problems)
    lines: list[Line] = []
    hashed = 0
    for _, ln in scanned:
        if isinstance(ln, PasswdEntry) and not is_hash(ln.hash):
            ln = PasswdEntry(ln.username, hash_fn(ln.hash.encode("utf-8")))
            hashed += 1
        lines.append(ln)
    return PasswdFile(tuple(lines)), hashed
