"""The listener's auth plugins: the password file (``ternmq_passwd``) and the ACL (``ternmq_acl``).

Theory of operation. ``from_config`` loads both files once (a missing or broken file
stops start-up with every problem and its line). The server calls
``reload_if_changed`` every few seconds: a file whose (mtime, ctime, size, inode)
changed is parsed again and swapped in whole; a broken (or vanished) file keeps the
rules in force and raises ``AuthFileError`` for the server to log, once per change, so
the log is not flooded every few seconds while an operator is fixing it. Each loaded
file is one immutable snapshot behind one attribute, so readers need no lock and never
see half a file.

Decisions (MQTT 5 reason codes; the session maps them for 3.1/3.1.1)::

    no username                 allow_anonymous ? 0 : 0x87 not authorized
    username, plugin off        allow_anonymous ? 0 : 0x87 (nothing could check it)
    username, plugin on         0 if the file has it and the password matches,
                                else 0x86 bad user name or password

Unlike VerneMQ, where ``allow_anonymous = on`` skips every auth hook, a client that
*does* send a username is checked whenever the password plugin is on (mosquitto's
behaviour): a wrong password is never accepted. With the ACL plugin off every client
may publish and subscribe anywhere; with it on, only what the ACL grants.

Cost. argon2 takes tens of milliseconds by design, so the server runs ``authenticate``
in a thread executor; this class is thread-safe for that. A successful verification is
cached as (username -> stored hash, keyed HMAC of the password): a reconnect storm
with the right passwords costs one HMAC each, while a changed entry (new hash in the
file) or a different password misses the cache and is verified in full. Failures are
never cached. The cache is bounded (oldest entries go first).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from argon2 import PasswordHasher

from services.listener.mqtt.topics import parse_shared
from services.listener.mqtt.types import ReasonCode

from .acl import Access, Acl, parse_acl
from .errors import AuthFileError, FileProblem
from .hashing import DEFAULT_HASHER, verify_password
from .passwd_file import parse_passwd

T = TypeVar("T")

_Signature = tuple[int, int, int, int]
"""(mtime_ns, ctime_ns, size, inode): what ``reload_if_changed`` compares."""

_UNREADABLE: _Signature = (-1, -1, -1, -1)

DEFAULT_CACHE_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class _Loaded(Generic[T]):
    signature: _Signature
    value: T


def _signature(st: os.stat_result) -> _Signature:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


@dataclass(slots=True)
class AuthStats:
    """Counters for metrics: full password verifications vs. cache hits."""

    verifications: int = 0
    cache_hits: int = 0
    failures: int = 0


class _WatchedFile(Generic[T]):
    """One file, parsed by ``parse(text, source)``, reloaded when its signature changes."""

    def __init__(self, path: Path, parse: Callable[[str, str], T]) -> None:
        self.path = path
        self._parse = parse
        self.current: _Loaded[T] = self._load()
        self._failed: _Signature | None = None

    def _load(self) -> _Loaded[T]:
        source = str(self.path)
        try:
            with self.path.open("rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
        except OSError as e:
            raise AuthFileError([FileProblem(source, 0, f"cannot read: {e.strerror}")]) from e
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data[: e.start].count(b"\n") + 1
            raise AuthFileError([FileProblem(source, line, "not valid UTF-8")]) from e
        return _Loaded(_signature(st), self._parse(text, source))

    def reload_if_changed(self) -> bool:
        """Swap in the file's new contents if it changed; AuthFileError keeps the old."""
        try:
            signature = _signature(self.path.stat())
        except OSError as e:
            if self._failed == _UNREADABLE:
                return False
            self._failed = _UNREADABLE
            problem = FileProblem(str(self.path), 0, f"cannot read: {e.strerror}")
            raise AuthFileError([problem]) from e
        if signature == self.current.signature:
            self._failed = None  # back as it was loaded: report the next breakage again
            return False
        if signature == self._failed:
            return False
        try:
            self.current = self._load()
        except AuthFileError:
            self._failed = signature
            raise
        self._failed = None
        return True


class Authorizer:
    """Implements ``services.listener.session.auth.Authorizer`` over the two files."""

    def __init__(
        self,
        *,
        allow_anonymous: bool,
        password_file: str | Path | None = None,
        acl_file: str | Path | None = None,
        hasher: PasswordHasher = DEFAULT_HASHER,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        """``None`` for a file means its plugin is off. Raises AuthFileError."""
        self.allow_anonymous = allow_anonymous
        self._hasher = hasher
        self._passwd = (
            _WatchedFile(Path(password_file), lambda t, s: parse_passwd(t, s).entries())
            if password_file is not None
            else None
        )
        self._acl = _WatchedFile(Path(acl_file), parse_acl) if acl_file is not None else None
        self._reload_lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._cache_size = cache_size
        self._cache_key = secrets.token_bytes(32)
        self.stats = AuthStats()

    # -- authentication --------------------------------------------------------------

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None, peer: str
    ) -> int:
        """MQTT 5 reason code for a CONNECT: 0 accepts it. Thread-safe, may be slow."""
        if username is None or self._passwd is None:
            return 0 if self.allow_anonymous else ReasonCode.NOT_AUTHORIZED
        stored = self._passwd.current.value.get(username)
        if stored is not None and password is not None and self._verify(username, stored, password):
            return 0
        with self._cache_lock:
            self.stats.failures += 1
        return ReasonCode.BAD_USER_NAME_OR_PASSWORD

    def _verify(self, username: str, stored: str, password: bytes) -> bool:
        """Check against the cache of successes first, then the (slow) hash."""
        digest = hmac.new(self._cache_key, password, hashlib.sha256).digest()
        with self._cache_lock:
            cached = self._cache.get(username)
            if (
                cached is not None
                and cached[0] == stored
                and hmac.compare_digest(cached[1], digest)
            ):
                self.stats.cache_hits += 1
                return True
            self.stats.verifications += 1
        if not verify_password(stored, password, self._hasher):
            return False
        with self._cache_lock:
            self._cache[username] = (stored, digest)
            self._cache.move_to_end(username)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return True

    # -- authorisation ---------------------------------------------------------------

    def authorize_publish(
        self, client_id: str, username: str | None, mountpoint: str, topic: str
    ) -> bool:
        """Whether the client may publish to ``topic`` (as it sees it, no mountpoint)."""
        if self._acl is None:
            return True
        return self._acl.current.value.allows(
            Access.WRITE, topic, client_id=client_id, username=username, mountpoint=mountpoint
        )

    def authorize_subscribe(
        self, client_id: str, username: str | None, mountpoint: str, topic_filter: str
    ) -> bool:
        """Whether the client may subscribe to ``topic_filter``.

        A shared subscription ``$share/group/f`` is checked as ``f``: the ACL governs
        which messages a client may receive, and the group does not change that.
        """
        if self._acl is None:
            return True
        _group, plain = parse_shared(topic_filter)
        return self._acl.current.value.allows(
            Access.READ, plain, client_id=client_id, username=username, mountpoint=mountpoint
        )

    # -- reloading -------------------------------------------------------------------

    def reload_if_changed(self) -> bool:
        """Reload whichever file changed; True if any was reloaded.

        Raises AuthFileError (all broken files' problems) after applying the good ones;
        a broken file keeps its previous rules in force.
        """
        reloaded = False
        errors: list[AuthFileError] = []
        with self._reload_lock:
            for watched in (self._passwd, self._acl):
                if watched is None:
                    continue
                try:
                    reloaded = watched.reload_if_changed() or reloaded
                except AuthFileError as e:
                    errors.append(e)
        if errors:
            raise AuthFileError(p for e in errors for p in e.problems)
        return reloaded

    @property
    def usernames(self) -> frozenset[str]:
        """Users in the password file (for ``plugin show`` and tests)."""
        return frozenset(self._passwd.current.value) if self._passwd else frozenset()

    @property
    def acl(self) -> Acl | None:
        return self._acl.current.value if self._acl else None


def from_config(
    config: Mapping[str, Any], *, hasher: PasswordHasher = DEFAULT_HASHER
) -> Authorizer:
    """The Authorizer the listener's config asks for; AuthFileError if a file is unusable.

    Relative file names are relative to the working directory, as in the config file.
    """
    return Authorizer(
        allow_anonymous=bool(config["allow_anonymous"]),
        password_file=(
            config["ternmq_passwd.password_file"] if config["plugins.ternmq_passwd"] else None
        ),
        acl_file=config["ternmq_acl.acl_file"] if config["plugins.ternmq_acl"] else None,
        hasher=hasher,
    )
