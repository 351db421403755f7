"""The installed ``ternmq-passwd`` console script, checked against the broker's Authorizer.

Runs the real script from the venv (``pip install -e .`` creates it) with passwords on
standard input, as a provisioning script would, then asks the ``Authorizer`` that the
listener uses whether the file it wrote lets the right clients in.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from services.listener.auth.authorizer import Authorizer
from services.listener.auth.errors import AuthFileError

pytestmark = pytest.mark.integration

SCRIPT = Path(sys.executable).parent / "ternmq-passwd"
OK, BAD_CREDENTIALS = 0, 0x86

# mosquitto_passwd 2.0.11 -H sha512: user bob, password hunter2 (vmq-passwd's format).
BOB_SHA512 = (
    "bob:$6$2/sey0j+z6uD98Qj$W9PXH33Qi8espk3zE3Pqwuoi1xtkxQ9BVFS6KxZFNnGU9U64MP5EByinuU"
    "X0zJzWmefPvOtL458Oy9mmzdEC3A=="
)


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"{SCRIPT} missing: run `.venv/bin/pip install -e .`"
    proc = subprocess.run(
        [str(SCRIPT), *args], input=stdin, capture_output=True, timeout=60, check=False
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )


def login(auth: Authorizer, user: str, password: bytes) -> int:
    return auth.authenticate("client-1", user, password, "127.0.0.1:50000")


def test_create_add_update_delete_and_the_broker_follows(tmp_path: Path) -> None:
    pw = tmp_path / "ternmq.passwd"
    r = run("-c", str(pw), "alice", stdin=b"alice-pw\n")
    assert (r.returncode, r.stderr) == (0, "")
    assert stat.S_IMODE(pw.stat().st_mode) == 0o600
    assert pw.read_text().startswith("alice:$argon2id$v=19$")

    auth = Authorizer(allow_anonymous=False, password_file=pw)
    assert login(auth, "alice", b"alice-pw") == OK
    assert login(auth, "alice", b"alice-pw\n") == BAD_CREDENTIALS

    # add a user (CRLF from a Windows script), then change alice's password
    assert run(str(pw), "bob", stdin=b"bob pw\r\n").returncode == 0
    assert run(str(pw), "alice", stdin=b"alice-2\n").returncode == 0
    assert [line.split(":")[0] for line in pw.read_text().splitlines()] == ["alice", "bob"]
    assert auth.reload_if_changed() is True
    assert login(auth, "bob", b"bob pw") == OK
    assert login(auth, "alice", b"alice-2") == OK
    assert login(auth, "alice", b"alice-pw") == BAD_CREDENTIALS

    r = run("-D", str(pw), "bob")
    assert (r.returncode, r.stderr) == (0, "")
    assert auth.reload_if_changed() is True
    assert login(auth, "bob", b"bob pw") == BAD_CREDENTIALS
    assert auth.usernames == {"alice"}

    # -c overwrites an existing file
    assert run("-c", str(pw), "carol", stdin=b"c\n").returncode == 0
    assert auth.reload_if_changed() is True
    assert auth.usernames == {"carol"}


def test_upgrade_plain_text_file_keeps_existing_hashes(tmp_path: Path) -> None:
    pw = tmp_path / "plain.passwd"
    pw.write_text(f"# migrated from mosquitto\ncarl:plain text\n{BOB_SHA512}\n")
    os.chmod(pw, 0o640)
    with pytest.raises(AuthFileError, match="not a password hash"):
        Authorizer(allow_anonymous=False, password_file=pw)  # plain text never logs in

    r = run("-U", str(pw))
    assert r.returncode == 0, r.stderr
    assert "kept 1 entries that were already hashed" in r.stderr
    assert stat.S_IMODE(pw.stat().st_mode) == 0o640
    lines = pw.read_text().splitlines()
    assert lines[0] == "# migrated from mosquitto"
    assert lines[1].startswith("carl:$argon2id$")
    assert lines[2] == BOB_SHA512

    auth = Authorizer(allow_anonymous=False, password_file=pw)
    assert login(auth, "carl", b"plain text") == OK
    assert login(auth, "bob", b"hunter2") == OK
    assert login(auth, "carl", b"plain") == BAD_CREDENTIALS


def test_usage_error_exits_2(tmp_path: Path) -> None:
    r = run("-c", "-D", str(tmp_path / "f"), "u")  # more cases: tests/unit/test_auth_passwd_cli.py
    assert r.returncode == 2
    assert "usage: ternmq-passwd" in r.stderr
    assert not (tmp_path / "f").exists()


def test_help_exits_0() -> None:
    r = run("--help")
    assert r.returncode == 0 and "-U" in r.stdout


def test_failures_exit_1_and_leave_the_file_alone(tmp_path: Path) -> None:
    pw = tmp_path / "ternmq.passwd"
    r = run(str(pw), "alice", stdin=b"pw\n")
    assert r.returncode == 1 and "use -c to create it" in r.stderr
    assert not pw.exists()

    pw.write_text(f"{BOB_SHA512}\n")
    before = pw.read_bytes()
    for args, stdin, message in [
        (("-D", str(pw), "nobody"), b"", "user 'nobody' not found"),
        ((str(pw), "alice"), b"", "no password on standard input"),
        ((str(pw), "alice"), b"\n", "empty password"),
        (("-U", str(tmp_path / "missing")), b"", "no such file"),
    ]:
        r = run(*args, stdin=stdin)
        assert (r.returncode, message in r.stderr) == (1, True), r.stderr
    assert pw.read_bytes() == before

    pw.write_text("alice:plain\n")
    r = run(str(pw), "bob", stdin=b"x\n")
    assert r.returncode == 1
    assert f"{pw}:1: user 'alice': not a password hash" in r.stderr
    assert pw.read_text() == "alice:plain\n"
    assert list(tmp_path.glob(".*.tmp")) == []
