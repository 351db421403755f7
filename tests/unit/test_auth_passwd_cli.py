"""ternmq-passwd's command line, in process (the real script runs in
tests/integration/test_passwd_cli.py). Only paths that read no password are here."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.listener.auth.passwd_cli import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "takes a password file and a username"),
        (("f",), "takes a password file and a username"),
        (("-c", "f"), "-c takes a password file and a username"),
        (("-D", "f"), "-D takes a password file and a username"),
        (("-U", "f", "u"), "-U takes a password file"),
        (("-U",), "-U takes a password file"),
        (("-c", "-D", "f", "u"), "exclude each other"),
        (("-U", "-U", "f"), "exclude each other"),
        (("-x", "f", "u"), "unknown option -x"),
        (("-b", "f", "u", "pw"), "unknown option -b"),
        (("f", "a:b"), "invalid username 'a:b': username contains ':'"),
        (("-c", "f", ""), "invalid username '': empty username"),
        (("f", "u", "extra"), "takes a password file and a username"),
    ],
)
def test_usage_errors_exit_2_and_touch_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    argv = [str(tmp_path / a) if a == "f" else a for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "usage: ternmq-passwd [-c | -D] passwordfile username" in err
    assert list(tmp_path.iterdir()) == []


def test_double_dash_ends_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pw").write_text("-D:$6$c2FsdGVk$" + "A" * 86 + "==\n")
    assert main(["-D", "--", str(tmp_path / "pw"), "-D"]) == 0
    assert (tmp_path / "pw").read_text() == ""
    assert capsys.readouterr().err == ""


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-h"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ternmq-passwd")
    assert "-U" in out and "standard input" in out


def test_delete_reports_a_broken_file_with_line_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pw = tmp_path / "pw"
    pw.write_text("# ok\nann:secret\nbob\n")
    assert main(["-D", str(pw), "ann"]) == 1
    err = capsys.readouterr().err
    assert f"{pw}:2: user 'ann': not a password hash" in err
    assert f"{pw}:3: expected username:password" in err
    assert pw.read_text() == "# ok\nann:secret\nbob\n"
