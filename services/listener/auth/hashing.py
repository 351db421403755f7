"""Password hashes as stored in a password file, old and new.

Theory of operation: the stored hash names its own scheme by its prefix, so one file may
mix entries written by different tools; new entries are always argon2id.

=====================================  ==================================================
``$argon2id$v=19$m=..,t=..,p=..$S$H``  argon2 PHC string, written by ``ternmq-passwd``
                                       (``$argon2i$``/``$argon2d$`` verify too; mosquitto
                                       2.1 writes the same format)
``$7$ITER$SALT$HASH``                  mosquitto 2.0: PBKDF2-HMAC-SHA512, ITER rounds,
                                       base64 salt and 64-byte key
``$6$SALT$HASH``                       ``vmq-passwd`` and mosquitto 1.x: base64 of
                                       SHA-512(password || salt), a single round
=====================================  ==================================================

``$6$`` is fast to brute-force: such files keep working, and re-adding a user with
``ternmq-passwd`` replaces the entry with argon2id. Anything else (crypt(3) ``$1$``,
``$5$``, bcrypt, plain text) is *not* a hash here: the file parser rejects it, so a
plain-text file not yet converted with ``-U`` never authenticates anyone by accident.

Worked example: ``verify_password("$6$c2FsdA==$" + b64(sha512(b"pw" + b"salt")), b"pw")``
is True. Comparisons of SHA digests use ``hmac.compare_digest``; argon2 does its own.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from enum import Enum

from argon2 import PasswordHasher, extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError

DEFAULT_HASHER = PasswordHasher()
"""argon2-cffi's defaults (RFC 9106 low-memory profile): slow by design, so the listener
checks passwords off its event loop (``preauth``)."""

_SHA512_LEN = 64


class Scheme(Enum):
    ARGON2 = "argon2"
    PBKDF2_SHA512 = "$7$"
    SHA512 = "$6$"


def _b64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def scheme_of(stored: str) -> Scheme:
    """The scheme of a well-formed stored hash; ValueError saying why otherwise."""
    if stored.startswith(("$argon2id$", "$argon2i$", "$argon2d$")):
        try:
            extract_parameters(stored)
        except InvalidHashError as e:
            raise ValueError(f"malformed argon2 hash ({e})") from None
        return Scheme.ARGON2
    parts = stored.split("$")
    try:
        if stored.startswith("$7$") and len(parts) == 5:
            if int(parts[2]) < 1 or not _b64(parts[3]) or len(_b64(parts[4])) != _SHA512_LEN:
                raise ValueError
            return Scheme.PBKDF2_SHA512
        if stored.startswith("$6$") and len(parts) == 4:
            if not _b64(parts[2]) or len(_b64(parts[3])) != _SHA512_LEN:
                raise ValueError
            return Scheme.SHA512
    except (ValueError, UnicodeEncodeError, binascii.Error):
        raise ValueError(f"malformed {stored[:3]} hash") from None
    raise ValueError("not a password hash (expected $argon2id$, $7$ or $6$; run -U on plain text)")


def is_hash(stored: str) -> bool:
    """Whether ``stored`` is a well-formed hash of an accepted scheme."""
    try:
        scheme_of(stored)
    except ValueError:
        return False
    return True


def hash_password(password: bytes, hasher: PasswordHasher = DEFAULT_HASHER) -> str:
    """A new argon2id hash with a random salt."""
    return str(hasher.hash(password))


def verify_password(stored: str, password: bytes, hasher: PasswordHasher = DEFAULT_HASHER) -> bool:
    """Whether ``password`` matches ``stored``; ValueError if ``stored`` is no hash."""
    scheme = scheme_of(stored)
    if scheme is Scheme.ARGON2:
        try:
            return bool(hasher.verify(stored, password))
        except VerificationError:
            return False
    parts = stored.split("$")
    if scheme is Scheme.PBKDF2_SHA512:
        iterations, salt, expected = int(parts[2]), _b64(parts[3]), _b64(parts[4])
        got = hashlib.pbkdf2_hmac("sha512", password, salt, iterations, _SHA512_LEN)
    else:
        salt, expected = _b64(parts[2]), _b64(parts[3])
        got = hashlib.sha512(password + salt).digest()
    return hmac.compare_digest(got, expected)
