"""Password hashes and the password file format (services.listener.auth.hashing/passwd_file).

The ``$6$``/``$7$`` vectors were written by mosquitto_passwd 2.0.11 (Debian 12), an
independent implementation: ``-H sha512`` gives the vmq-passwd/mosquitto 1.x format.
"""

from __future__ import annotations

import pytest
from argon2 import PasswordHasher

from services.listener.auth.errors import AuthFileError
from services.listener.auth.hashing import (
    Scheme,
    hash_password,
    is_hash,
    scheme_of,
    verify_password,
)
from services.listener.auth.passwd_file import (
    PasswdEntry,
    PasswdFile,
    check_username,
    parse_passwd,
    upgrade_plaintext,
)

FAST = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)

# mosquitto_passwd -c -b f alice 'wonder land'; -H sha512 -b f bob hunter2; -b f carol pässwörd
MOSQUITTO_FILE = (
    "alice:$7$101$LQkNHjzruGCfMRfp$eLWV0TlmsCLEZs4CfX9PP8VOdly03ZXrgh2I8lqZo3wBIV72cd6B"
    "tMXqcP2SSrnnBCiZcSeteIhy2O+WM1GAaQ==\n"
    "bob:$6$2/sey0j+z6uD98Qj$W9PXH33Qi8espk3zE3Pqwuoi1xtkxQ9BVFS6KxZFNnGU9U64MP5EByinuU"
    "X0zJzWmefPvOtL458Oy9mmzdEC3A==\n"
    "carol:$7$101$ZqeYaewYdEhcTTbC$QTUQbQGdzXlstIgtBc20ArxxafwRzAFPTaI/UMFcBvnaTVZRgxByD3"
    "rGxHmI1RZbaObnlriNZbJQDq1Bsga+dA==\n"
)


@pytest.fixture(scope="module")
def mosquitto() -> dict[str, str]:
    return parse_passwd(MOSQUITTO_FILE, "mosquitto.passwd").entries()


# -- hashes ------------------------------------------------------------------------------


def test_mosquitto_pbkdf2_and_sha512_vectors_verify(mosquitto: dict[str, str]) -> None:
    assert scheme_of(mosquitto["alice"]) is Scheme.PBKDF2_SHA512
    assert scheme_of(mosquitto["bob"]) is Scheme.SHA512
    assert verify_password(mosquitto["alice"], b"wonder land")
    assert verify_password(mosquitto["bob"], b"hunter2")
    assert verify_password(mosquitto["carol"], "pässwörd".encode())


@pytest.mark.parametrize("user", ["alice", "bob", "carol"])
@pytest.mark.parametrize("wrong", [b"", b"hunter", b"hunter2 ", b"wonder  land", b"x" * 200])
def test_legacy_hashes_refuse_other_passwords(
    mosquitto: dict[str, str], user: str, wrong: bytes
) -> None:
    assert not verify_password(mosquitto[user], wrong)


def test_argon2id_round_trip_with_random_salt() -> None:
    first, second = hash_password(b"s3cret", FAST), hash_password(b"s3cret", FAST)
    assert first.startswith("$argon2id$") and first != second
    assert scheme_of(first) is Scheme.ARGON2
    assert verify_password(first, b"s3cret", FAST)
    assert verify_password(second, b"s3cret", FAST)
    assert not verify_password(first, b"s3cret!", FAST)
    assert not verify_password(first, b"", FAST)


def test_default_hasher_writes_argon2id_with_strong_parameters() -> None:
    stored = hash_password(b"pw")
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    assert verify_password(stored, b"pw")


@pytest.mark.parametrize(
    "text",
    [
        "hunter2",  # plain text, not converted with -U
        "$1$abc$def",  # crypt(3) MD5
        "$5$abc$def",
        "$2b$12$abcdefghijklmnopqrstuv",  # bcrypt
        "$6$c2FsdA==$dG9vc2hvcnQ=",  # digest not 64 bytes
        "$6$!!!$" + "A" * 88,  # salt not base64
        "$6$$" + "A" * 86 + "==",  # empty salt
        "$7$0$c2FsdA==$" + "A" * 86 + "==",  # zero iterations
        "$7$x$c2FsdA==$" + "A" * 86 + "==",
        "$7$101$c2FsdA==",  # missing hash
        "$argon2id$v=19$m=65536,t=3,p=4$broken",
        "",
    ],
)
def test_non_hashes_are_rejected(text: str) -> None:
    assert not is_hash(text)
    with pytest.raises(ValueError):
        scheme_of(text)
    with pytest.raises(ValueError):
        verify_password(text, b"hunter2")


# -- usernames ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("john", True),
        ("jöhn doe", True),
        ("a@b.c", True),
        ("", False),
        ("a:b", False),
        ("a\nb", False),
        ("a\x7fb", False),
        ("bad\udcff", False),  # undecodable bytes from the command line (surrogateescape)
        ("x" * 65536, False),
    ],
)
def test_check_username(name: str, ok: bool) -> None:
    assert (check_username(name) is None) is ok


# -- file format -------------------------------------------------------------------------


def test_parse_keeps_comments_and_order_and_edits_in_place(mosquitto: dict[str, str]) -> None:
    text = "# ops team\n" + MOSQUITTO_FILE.replace("bob:", "\nbob:", 1)
    pf = parse_passwd(text, "f")
    assert list(pf.entries()) == ["alice", "bob", "carol"]
    assert pf.render() == text
    updated = pf.with_user("bob", "$NEW").without_user("alice").with_user("dave", "$D")
    lines = updated.render().splitlines()
    assert lines[0] == "# ops team"
    assert lines[1] == ""
    assert lines[2] == "bob:$NEW"
    assert lines[3].startswith("carol:$7$")
    assert lines[4] == "dave:$D"
    assert len(lines) == 5


def test_crlf_lines_and_surrounding_blank_lines_parse() -> None:
    pf = parse_passwd(MOSQUITTO_FILE.replace("\n", "\r\n") + "\r\n", "f")
    assert set(pf.entries()) == {"alice", "bob", "carol"}
    assert verify_password(pf.entries()["bob"], b"hunter2")


def test_without_unknown_user_raises_and_with_invalid_user_refused() -> None:
    pf = PasswdFile((PasswdEntry("a", "$x"),))
    with pytest.raises(KeyError):
        pf.without_user("b")
    with pytest.raises(ValueError, match="':'"):
        pf.with_user("b:c", "$x")
    assert "a" in pf and "b" not in pf


def test_every_bad_line_is_reported_with_its_number() -> None:
    text = "\n".join(
        [
            "# header",
            "alice:hunter2",  # 2: plain text
            "no colon here",  # 3
            ":$6$x$y",  # 4: empty username
            MOSQUITTO_FILE.splitlines()[1],  # 5: bob, good
            MOSQUITTO_FILE.splitlines()[1],  # 6: bob again
            "carol:",  # 7: empty password
        ]
    )
    with pytest.raises(AuthFileError) as info:
        parse_passwd(text, "/etc/ternmq.passwd")
    lines = [(p.line, p.source) for p in info.value.problems]
    assert lines == [(n, "/etc/ternmq.passwd") for n in (2, 3, 4, 6, 7)]
    message = str(info.value)
    assert "/etc/ternmq.passwd:2: user 'alice': not a password hash" in message
    assert "/etc/ternmq.passwd:6: user 'bob' already on line 5" in message
    assert "/etc/ternmq.passwd:7: user 'carol': empty password" in message


def test_empty_file_has_no_users() -> None:
    assert parse_passwd("", "f").entries() == {}
    assert parse_passwd("# only a comment\n\n", "f").entries() == {}


# -- -U upgrade --------------------------------------------------------------------------


def test_upgrade_hashes_plain_text_and_keeps_existing_hashes(mosquitto: dict[str, str]) -> None:
    bob_line = MOSQUITTO_FILE.splitlines()[1]
    text = f"# converted\nann:plain pw \n{bob_line}\ncarl:has:colons\n"
    pf, hashed = upgrade_plaintext(text, "f", lambda pw: hash_password(pw, FAST))
    assert hashed == 2
    entries = pf.entries()
    assert verify_password(entries["ann"], b"plain pw ", FAST)  # trailing space kept
    assert verify_password(entries["carl"], b"has:colons", FAST)
    assert entries["bob"] == mosquitto["bob"]  # not hashed a second time
    assert pf.render().startswith("# converted\nann:$argon2id$")
    again, rehashed = upgrade_plaintext(pf.render(), "f", lambda pw: hash_password(pw, FAST))
    assert rehashed == 0 and again == pf


def test_upgrade_hashes_nothing_when_a_line_is_bad() -> None:
    calls: list[bytes] = []

    def hash_fn(pw: bytes) -> str:
        calls.append(pw)
        return "$x"

    with pytest.raises(AuthFileError) as info:
        upgrade_plaintext("ann:pw\nbroken\nann:again\n", "plain", hash_fn)
    assert [p.line for p in info.value.problems] == [2, 3]
    assert calls == []
