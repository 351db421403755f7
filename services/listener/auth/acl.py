"""ACL files in VerneMQ's ``vmq_acl`` syntax, and the topic checks they grant.

Theory of operation. A file is read top to bottom (``#`` starts a comment line)::

    topic [read|write] <topic>     grant to every client, until the first "user" line
    user <username>                the following "topic" lines are for this user only
    pattern [read|write] <topic>   grant to every client after substituting, wherever
                                   it stands: %c client id, %u username, %m mountpoint

Without ``read``/``write`` a line grants both; ``read`` allows SUBSCRIBE, ``write``
PUBLISH (and wills). ``readwrite`` is accepted as mosquitto spells "both". A topic may
contain spaces and MQTT wildcards. A client is allowed if *any* of the everyone rules,
its username's rules or the substituted patterns covers the request; there is no deny.
As in VerneMQ's code, the everyone rules apply to named users too, not only to
anonymous ones, and the topics are those the client sees (without its mountpoint).

**Covering.** An ACL topic ``A`` covers a request ``R`` (a topic name when publishing,
a filter when subscribing) when every topic that ``R`` matches is matched by ``A``:
compared level by level, an ``A`` level ``#`` covers the rest (also nothing: ``a/#``
covers ``a``), ``+`` covers one level, whether a name or ``+`` in ``R``, and a name
covers only the same name. A ``#`` in ``R`` is covered only by ``#`` in ``A`` (or by
``+/#`` at the top, which is the same set), so ``a/+`` does *not* cover ``a/#``
(VerneMQ's match would allow it, granting ``a/b/c``). The rule is exact set inclusion.
An ``A`` starting with a wildcard never covers an ``R`` starting with ``$``
[MQTT-4.7.2-1]. Examples: ``sensor/+/data`` covers ``sensor/7/data`` and
``sensor/+/data`` but not ``sensor/#``; ``#`` covers everything but ``$SYS/...``.

**Patterns.** ``%c``, ``%u`` and ``%m`` are replaced only where they form a whole level
(``a/%u/b``); elsewhere they are an error, as is ``%c`` in a ``topic`` line, where it
would silently be a literal level. A pattern does not apply when a value it needs is
missing, empty or contains ``/``, ``+`` or ``#`` (no username for ``%u``; a client id
``+`` must not turn ``x/%c`` into a wildcard grant). The mountpoint is split at ``/``
(an empty one is one empty level, as in VerneMQ) and must hold no wildcard.

Parsing reports every bad line with its number and raises ``AuthFileError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Flag
from types import MappingProxyType

from services.listener.mqtt.errors import TopicFilterInvalid
from services.listener.mqtt.topics import SHARE_PREFIX, validate_topic_filter

from .errors import AuthFileError, FileProblem


class Access(Flag):
    READ = 1
    WRITE = 2
    READWRITE = READ | WRITE


_ACCESS_WORDS = {"read": Access.READ, "write": Access.WRITE, "readwrite": Access.READWRITE}
_UNSUPPORTED_ACCESS = ("deny", "subscribe")  # mosquitto's; never read as part of a topic
_VARIABLES = ("%c", "%u", "%m")
_UNSAFE_VALUE = ("/", "+", "#")


@dataclass(frozen=True, slots=True)
class AclRule:
    access: Access
    levels: tuple[str, ...]
    line: int

    @property
    def topic(self) -> str:
        return "/".join(self.levels)


def covers(acl: Sequence[str], requested: Sequence[str]) -> bool:
    """Whether ACL filter ``acl`` matches every topic the filter ``requested`` matches.

    Laws (tested exhaustively on small alphabets): for a topic name (no wildcards) this
    is exactly MQTT filter matching; for filters it is exact set inclusion, so it never
    grants a topic the ACL does not match, and refuses only when there is such a topic.
    """
    if requested and requested[0].startswith("$") and acl and acl[0] in ("+", "#"):
        return False
    for i, level in enumerate(acl):
        if level == "#":
            return True
        if i >= len(requested):
            return False
        if requested[i] == "#":
            # R's "#" also matches R's parent, unless that is "" (no valid topic name): then
            # it needs one more level at least, which "+/#" covers ("+/#" is "#" at the top).
            return level == "+" and list(acl[i + 1 :]) == ["#"] and not "/".join(requested[:i])
        if level != "+" and level != requested[i]:
            return False
    return len(acl) == len(requested)


def _substitute(
    levels: tuple[str, ...], client_id: str, username: str | None, mountpoint: str
) -> list[str] | None:
    """The pattern's levels with variables replaced, or None if it cannot apply."""
    out: list[str] = []
    for level in levels:
        if level == "%m":
            if "+" in mountpoint or "#" in mountpoint:
                return None
            out.extend(mountpoint.split("/"))
        elif level in ("%c", "%u"):
            value = client_id if level == "%c" else username
            if not value or any(ch in value for ch in _UNSAFE_VALUE):
                return None
            out.append(value)
        else:
            out.append(level)
    return out


def _grants(rules: Sequence[AclRule], access: Access, req: Sequence[str]) -> bool:
    return any(access in rule.access and covers(rule.levels, req) for rule in rules)


@dataclass(frozen=True, slots=True)
class Acl:
    """Parsed rules; ``allows`` answers one request."""

    everyone: tuple[AclRule, ...] = ()
    users: Mapping[str, tuple[AclRule, ...]] = field(default_factory=lambda: MappingProxyType({}))
    patterns: tuple[AclRule, ...] = ()

    def allows(
        self,
        access: Access,
        requested: str,
        *,
        client_id: str,
        username: str | None,
        mountpoint: str,
    ) -> bool:
        """Whether the client may ``access`` the topic name or filter ``requested``."""
        req = requested.split("/")
        if _grants(self.everyone, access, req):
            return True
        if username is not None and _grants(self.users.get(username, ()), access, req):
            return True
        for rule in self.patterns:
            if access in rule.access:
                levels = _substitute(rule.levels, client_id, username, mountpoint)
                if levels is not None and covers(levels, req):
                    return True
        return False


def _parse_grant(
    keyword: str, rest: str, at: tuple[str, int], problems: list[FileProblem]
) -> AclRule | None:
    """The rule of a ``topic``/``pattern`` line's remainder, or None after a problem."""
    words = rest.split(None, 1)
    access = Access.READWRITE
    topic = rest
    if len(words) == 2 and words[0] in _ACCESS_WORDS:
        access, topic = _ACCESS_WORDS[words[0]], words[1]
    elif len(words) == 2 and words[0] in _UNSUPPORTED_ACCESS:
        problems.append(
            FileProblem(*at, f"access {words[0]!r} is not supported (read, write or none)")
        )
        return None
    topic = topic.strip()
    try:
        validate_topic_filter(topic)
    except TopicFilterInvalid as e:
        problems.append(FileProblem(*at, f"invalid topic {topic!r}: {e}"))
        return None
    if topic.startswith(SHARE_PREFIX):
        problems.append(
            FileProblem(*at, f"no {SHARE_PREFIX} in ACLs: shared filters are checked without it")
        )
        return None
    levels = tuple(topic.split("/"))
    for level in levels:
        embedded = [v for v in _VARIABLES if v in level]
        if not embedded:
            continue
        if keyword == "topic":
            problems.append(
                FileProblem(*at, f"{embedded[0]} is substituted only in 'pattern' lines")
            )
            return None
        if level not in _VARIABLES:
            problems.append(
                FileProblem(*at, f"{embedded[0]} must be a whole topic level in {topic!r}")
            )
            return None
    return AclRule(access, levels, at[1])


def parse_acl(text: str, source: str) -> Acl:
    """Parse an ACL file; AuthFileError listing every bad line."""
    problems: list[FileProblem] = []
    everyone: list[AclRule] = []
    users: dict[str, list[AclRule]] = {}
    patterns: list[AclRule] = []
    user: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, *more = line.split(None, 1)
        rest = more[0] if more else ""
        if keyword not in ("topic", "user", "pattern"):
            problems.append(
                FileProblem(source, lineno, f"unknown keyword {keyword!r} (topic, user or pattern)")
            )
        elif not rest:
            problems.append(FileProblem(source, lineno, f"{keyword!r} needs an argument"))
        elif keyword == "user":
            user = rest
            users.setdefault(user, [])
        else:
            rule = _parse_grant(keyword, rest, (source, lineno), problems)
            if rule is None:
                continue
            if keyword == "pattern":
                patterns.append(rule)
            elif user is None:
                everyone.append(rule)
            else:
                users[user].append(rule)
    if problems:
        raise AuthFileError(problems)
    return Acl(
        tuple(everyone),
        MappingProxyType({name: tuple(rules) for name, rules in users.items()}),
        tuple(patterns),
    )
