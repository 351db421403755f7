"""``ternmq-passwd``: manage a password file, as ``vmq-passwd`` and ``mosquitto_passwd`` do.

The file is rewritten atomically (a temporary file in the same directory, fsynced, then
renamed over the old one), so the broker's reloader never reads half a file; the new
file keeps the old one's permissions (0600 for a new file) and, when run as root, its
owner. Comments and the order of entries are kept. New hashes are argon2id; entries of
older formats (``$6$``, ``$7$``) stay valid until their user is updated.
"""

from __future__ import annotations

import getpass
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .errors import AuthFileError
from .hashing import hash_password
from .passwd_file import PasswdFile, check_username, parse_passwd, upgrade_plaintext

PROG = "ternmq-passwd"
SYNOPSIS = f"""\
usage: {PROG} [-c | -D] passwordfile username
       {PROG} -U passwordfile
"""
USAGE = f"""{SYNOPSIS}
  -c  create the password file with this user (an existing file is overwritten)
  -D  delete the user from the password file
  -U  replace the plain-text passwords of a file of username:password lines by hashes
      (entries that already are hashes are kept)

Without an option, add the user to the file or change their password. The password is
asked twice on a terminal, or read as one line from standard input (for scripts).
Usernames must not contain ':'.
"""

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class _Usage(Exception):
    pass


class _Failure(Exception):
    pass


def _parse_args(argv: Sequence[str]) -> tuple[str | None, Path, str | None]:
    """(mode, password file, username); ``_Usage`` if the command line is wrong."""
    modes: list[str] = []
    positional: list[str] = []
    options_done = False
    for arg in argv:
        if options_done or arg == "-" or not arg.startswith("-"):
            positional.append(arg)
        elif arg == "--":
            options_done = True
        elif arg in ("-c", "-D", "-U"):
            modes.append(arg)
        else:
            raise _Usage(f"unknown option {arg}")
    if len(modes) > 1:
        raise _Usage("-c, -D and -U exclude each other")
    mode = modes[0] if modes else None
    wanted = 1 if mode == "-U" else 2
    if len(positional) != wanted:
        what = "a password file" if wanted == 1 else "a password file and a username"
        raise _Usage(f"{mode or 'adding a user'} takes {what}")
    username = positional[1] if wanted == 2 else None
    if username is not None and (reason := check_username(username)):
        raise _Usage(f"invalid username {username!r}: {reason}")
    return mode, Path(positional[0]), username


def _read_password() -> bytes:
    """Twice on a terminal, else one line of standard input (its newline removed)."""
    if sys.stdin.isatty():
        first = getpass.getpass("Password: ")
        if getpass.getpass("Reenter password: ") != first:
            raise _Failure("passwords do not match")
        password = first.encode("utf-8", "surrogateescape")
    else:
        line = sys.stdin.buffer.readline()
        if not line:
            raise _Failure("no password on standard input")
        password = line.removesuffix(b"\n").removesuffix(b"\r")
    if not password:
        raise _Failure("empty password")
    return password


def _read_text(path: Path, hint: str = "") -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise _Failure(f"{path}: no such file{hint}") from None
    except OSError as e:
        raise _Failure(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise _Failure(f"{path}: not valid UTF-8") from None


def _load(path: Path, hint: str = "") -> PasswdFile:
    return parse_passwd(_read_text(path, hint), str(path))


def _write(path: Path, pf: PasswdFile) -> None:
    """Replace ``path`` atomically, keeping its mode (and owner, as root)."""
    target = Path(os.path.realpath(path))
    try:
        old = target.stat()
    except FileNotFoundError:
        old = None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:
        raise _Failure(f"{path}: cannot write: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(pf.render())
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, old.st_mode & 0o7777 if old else 0o600)
        if old and os.geteuid() == 0:
            os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _run(mode: str | None, path: Path, username: str | None) -> None:
    if mode == "-U":
        text = _read_text(path)
        pf, hashed = upgrade_plaintext(text, str(path), hash_password)
        kept = len(pf.entries()) - hashed
        _write(path, pf)
        if kept:
            print(f"{PROG}: kept {kept} entries that were already hashed", file=sys.stderr)
        return
    assert username is not None
    if mode == "-D":
        pf = _load(path)
        if username not in pf:
            raise _Failure(f"{path}: user {username!r} not found")
        _write(path, pf.without_user(username))
        return
    pf = PasswdFile() if mode == "-c" else _load(path, hint=" (use -c to create it)")
    _write(path, pf.with_user(username, hash_password(_read_password())))


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 1 failed (nothing changed), 2 bad command line."""
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(USAGE, end="")
        return EXIT_OK
    try:
        mode, path, username = _parse_args(args)
    except _Usage as e:
        print(f"{PROG}: {e}\n{SYNOPSIS}", end="", file=sys.stderr)
        return EXIT_USAGE
    try:
        _run(mode, path, username)
    except (_Failure, AuthFileError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as e:
        print(f"{PROG}: error: {path}: {e.strerror or e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
