"""The listener's Authorizer: decisions, config, reloading, the verification cache."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from services.common.config import Schema, parse_text
from services.listener.auth.authorizer import Authorizer, from_config
from services.listener.auth.errors import AuthFileError
from services.listener.auth.hashing import hash_password
from services.listener.config import SETTINGS
from services.listener.session.auth import Authorizer as AuthorizerProtocol
from tests.unit.test_auth_passwd_file import MOSQUITTO_FILE

FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
OK, BAD_CREDENTIALS, NOT_AUTHORIZED = 0, 0x86, 0x87


def write(path: Path, text: str) -> None:
    """Replace ``path`` as an editor or ternmq-passwd would, with a clearly newer mtime."""
    old_ns = path.stat().st_mtime_ns if path.exists() else 0
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    ns = max(old_ns + 1_000_000_000, path.stat().st_mtime_ns)
    os.utime(path, ns=(ns, ns))


@pytest.fixture
def passwd(tmp_path: Path) -> Path:
    path = tmp_path / "ternmq.passwd"
    write(path, f"ann:{hash_password(b'ann-pw', FAST)}\n{MOSQUITTO_FILE}")
    return path


@pytest.fixture
def acl(tmp_path: Path) -> Path:
    path = tmp_path / "ternmq.acl"
    write(path, "topic read public/#\nuser ann\ntopic ann/#\npattern write dev/%c/out\n")
    return path


def config(text: str) -> Authorizer:
    return from_config(parse_text(Schema(SETTINGS), text, "ternmq.conf"), hasher=FAST)


# -- configuration -----------------------------------------------------------------------


def test_defaults_accept_everyone_and_allow_everything() -> None:
    auth: AuthorizerProtocol = config("")  # mypy checks it fits the session's protocol
    assert auth.authenticate("c", None, None, "127.0.0.1:5") == OK
    assert auth.authenticate("c", "who", b"ever", "127.0.0.1:5") == OK
    assert auth.authorize_publish("c", None, "", "any/topic")
    assert auth.authorize_subscribe("c", None, "", "#")


def test_no_anonymous_and_no_plugin_refuses_everyone() -> None:
    auth = config("allow_anonymous = off\n")
    assert auth.authenticate("c", None, None, "p") == NOT_AUTHORIZED
    assert auth.authenticate("c", "ann", b"ann-pw", "p") == NOT_AUTHORIZED


def test_config_enables_both_plugins(passwd: Path, acl: Path) -> None:
    auth = config(
        "allow_anonymous = off\n"
        f"plugins.ternmq_passwd = on\nternmq_passwd.password_file = {passwd}\n"
        f"plugins.ternmq_acl = on\nternmq_acl.acl_file = {acl}\n"
    )
    assert auth.usernames == {"ann", "alice", "bob", "carol"}
    assert auth.authenticate("c", "ann", b"ann-pw", "p") == OK
    assert auth.authenticate("c", None, None, "p") == NOT_AUTHORIZED
    assert auth.authorize_subscribe("c", "ann", "", "ann/x/#")
    assert not auth.authorize_subscribe("c", "bob", "", "ann/x/#")


def test_missing_or_broken_files_stop_start_up(tmp_path: Path, passwd: Path) -> None:
    with pytest.raises(AuthFileError, match=r"nope\.acl: cannot read"):
        Authorizer(allow_anonymous=True, acl_file=tmp_path / "nope.acl")
    write(passwd, "ann:plain\n")
    with pytest.raises(AuthFileError, match=r"ternmq\.passwd:1: user 'ann': not a password hash"):
        config(f"plugins.ternmq_passwd = on\nternmq_passwd.password_file = {passwd}\n")
    bad_utf8 = tmp_path / "latin1.acl"
    bad_utf8.write_bytes(b"topic a\ntopic caf\xe9\n")
    with pytest.raises(AuthFileError, match=r"latin1\.acl:2: not valid UTF-8"):
        Authorizer(allow_anonymous=True, acl_file=bad_utf8)


# -- authentication ----------------------------------------------------------------------


@pytest.mark.parametrize("allow_anonymous", [True, False])
@pytest.mark.parametrize(
    ("username", "password", "expected"),
    [
        ("ann", b"ann-pw", OK),
        ("ann", b"ann-pw ", BAD_CREDENTIALS),
        ("ann", b"", BAD_CREDENTIALS),
        ("ann", None, BAD_CREDENTIALS),
        ("alice", b"wonder land", OK),  # mosquitto $7$
        ("bob", b"hunter2", OK),  # vmq-passwd / mosquitto $6$
        ("carol", "pässwörd".encode(), OK),
        ("bob", b"wonder land", BAD_CREDENTIALS),
        ("mallory", b"ann-pw", BAD_CREDENTIALS),  # unknown users too, even if anonymous is on
        ("", b"", BAD_CREDENTIALS),
    ],
)
def test_password_decisions(
    passwd: Path, allow_anonymous: bool, username: str, password: bytes | None, expected: int
) -> None:
    auth = Authorizer(allow_anonymous=allow_anonymous, password_file=passwd, hasher=FAST)
    assert auth.authenticate("client", username, password, "127.0.0.1:1") == expected


@pytest.mark.parametrize(("allow_anonymous", "expected"), [(True, OK), (False, NOT_AUTHORIZED)])
def test_anonymous_clients_with_a_password_file(
    passwd: Path, allow_anonymous: bool, expected: int
) -> None:
    auth = Authorizer(allow_anonymous=allow_anonymous, password_file=passwd, hasher=FAST)
    assert auth.authenticate("client", None, None, "p") == expected
    assert auth.authenticate("client", None, b"pw-without-user", "p") == expected


def test_successes_are_cached_and_failures_are_not(passwd: Path) -> None:
    auth = Authorizer(allow_anonymous=False, password_file=passwd, hasher=FAST)
    for _ in range(5):
        assert auth.authenticate("c", "ann", b"ann-pw", "p") == OK
    assert (auth.stats.verifications, auth.stats.cache_hits) == (1, 4)
    for _ in range(3):
        assert auth.authenticate("c", "ann", b"wrong", "p") == BAD_CREDENTIALS
    assert (auth.stats.verifications, auth.stats.cache_hits, auth.stats.failures) == (4, 4, 3)
    assert auth.authenticate("c", "ann", b"ann-pw", "p") == OK  # still cached
    assert auth.stats.cache_hits == 5


def test_a_changed_password_is_not_served_from_the_cache(passwd: Path) -> None:
    auth = Authorizer(allow_anonymous=False, password_file=passwd, hasher=FAST)
    assert auth.authenticate("c", "ann", b"ann-pw", "p") == OK
    write(passwd, f"ann:{hash_password(b'new-pw', FAST)}\n")
    assert auth.reload_if_changed() is True
    assert auth.authenticate("c", "ann", b"ann-pw", "p") == BAD_CREDENTIALS
    assert auth.authenticate("c", "ann", b"new-pw", "p") == OK
    write(passwd, "# everybody removed\n")
    assert auth.reload_if_changed() is True
    assert auth.authenticate("c", "ann", b"new-pw", "p") == BAD_CREDENTIALS


def test_cache_is_bounded(passwd: Path) -> None:
    auth = Authorizer(allow_anonymous=False, password_file=passwd, hasher=FAST, cache_size=1)
    assert auth.authenticate("c", "ann", b"ann-pw", "p") == OK
    assert auth.authenticate("c", "bob", b"hunter2", "p") == OK  # evicts ann
    assert auth.authenticate("c", "ann", b"ann-pw", "p") == OK
    assert (auth.stats.verifications, auth.stats.cache_hits) == (3, 0)


def test_concurrent_authentication_and_reloads(passwd: Path) -> None:
    auth = Authorizer(allow_anonymous=False, password_file=passwd, hasher=FAST)
    attempts = [("ann", b"ann-pw", OK), ("bob", b"hunter2", OK), ("ann", b"no", BAD_CREDENTIALS)]

    def attempt(i: int) -> bool:
        if i % 20 == 0:
            auth.reload_if_changed()
        user, pw, expected = attempts[i % len(attempts)]
        return auth.authenticate(f"c{i}", user, pw, "p") == expected

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(attempt, range(120)))
    assert all(results)
    s = auth.stats
    assert s.cache_hits + s.verifications == 120
    assert s.failures == 40


# -- authorisation -----------------------------------------------------------------------


def test_acl_decisions(acl: Path) -> None:
    auth = Authorizer(allow_anonymous=True, acl_file=acl)
    assert auth.authorize_subscribe("c", None, "", "public/news")
    assert auth.authorize_subscribe("c", None, "", "public/#")
    assert not auth.authorize_publish("c", None, "", "public/news")
    assert not auth.authorize_subscribe("c", None, "", "#")
    assert auth.authorize_publish("c", "ann", "", "ann/x")
    assert auth.authorize_subscribe("c", "ann", "", "ann/+")
    assert not auth.authorize_publish("c", "bob", "", "ann/x")
    assert auth.authorize_publish("dev1", None, "", "dev/dev1/out")
    assert not auth.authorize_publish("dev1", None, "", "dev/dev2/out")
    assert not auth.authorize_subscribe("dev1", None, "", "dev/dev1/out")


def test_shared_subscriptions_are_checked_without_the_share_prefix(acl: Path) -> None:
    auth = Authorizer(allow_anonymous=True, acl_file=acl)
    assert auth.authorize_subscribe("c", None, "", "$share/g1/public/#")
    assert not auth.authorize_subscribe("c", None, "", "$share/g1/private/#")
    assert auth.authorize_subscribe("c", "ann", "", "$share/ann/ann/x")


def test_acl_reload_swaps_rules_and_a_broken_file_keeps_them(acl: Path) -> None:
    auth = Authorizer(allow_anonymous=True, acl_file=acl)
    assert auth.reload_if_changed() is False
    write(acl, "topic write public/#\n")
    assert auth.reload_if_changed() is True
    assert auth.authorize_publish("c", None, "", "public/news")
    assert not auth.authorize_subscribe("c", None, "", "public/news")
    assert auth.reload_if_changed() is False

    write(acl, "topic write public/#\ntopic a/#/b\nbogus line\n")
    with pytest.raises(AuthFileError) as info:
        auth.reload_if_changed()
    assert [p.line for p in info.value.problems] == [2, 3]
    assert auth.authorize_publish("c", None, "", "public/news")  # old rules still in force
    assert auth.reload_if_changed() is False  # reported once per change, not every poll
    write(acl, "topic write public/#\ntopic a/#/b\n")
    with pytest.raises(AuthFileError) as info:
        auth.reload_if_changed()
    assert [p.line for p in info.value.problems] == [2]

    acl.unlink()
    with pytest.raises(AuthFileError, match="cannot read"):
        auth.reload_if_changed()
    assert auth.reload_if_changed() is False
    assert auth.authorize_publish("c", None, "", "public/news")

    write(acl, "topic read x\n")
    assert auth.reload_if_changed() is True
    assert not auth.authorize_publish("c", None, "", "public/news")
    assert auth.authorize_subscribe("c", None, "", "x")


def test_one_broken_file_does_not_block_the_other(passwd: Path, acl: Path) -> None:
    auth = Authorizer(allow_anonymous=False, password_file=passwd, acl_file=acl, hasher=FAST)
    write(passwd, "ann:not-a-hash\n")
    write(acl, "topic write everything/#\n")
    with pytest.raises(AuthFileError, match=r"ternmq\.passwd:1"):
        auth.reload_if_changed()
    assert auth.authorize_publish("c", None, "", "everything/x")  # the ACL was applied
    assert auth.authenticate("c", "ann", b"ann-pw", "p") == OK  # old passwords kept
