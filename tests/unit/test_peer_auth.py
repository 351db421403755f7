"""The inter-node handshake and the node identity file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.peer import auth
from services.common.peer.identity import IdentityError, load_or_create


def _md(creds: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return dict(creds)


def test_the_right_cookie_is_accepted_and_names_the_caller() -> None:
    v = auth.check("secret", _md(auth.credentials("secret", "a@h", 1000.0)), 1000.5)
    assert v.ok and v.node == "a@h" and v.reason == ""


def test_a_wrong_cookie_is_refused_naming_the_caller() -> None:
    v = auth.check("secret", _md(auth.credentials("guess", "a@h", 1000.0)), 1000.0)
    assert not v.ok and v.node == "a@h" and "cookie" in v.reason


@pytest.mark.parametrize("missing", [auth.NODE_KEY, auth.TIME_KEY, auth.PROOF_KEY])
def test_a_call_without_credentials_is_refused(missing: str) -> None:
    md = _md(auth.credentials("secret", "a", 5.0))
    del md[missing]
    assert not auth.check("secret", md, 5.0).ok


def test_a_stale_or_future_proof_is_refused() -> None:
    md = _md(auth.credentials("secret", "a", 1000.0))
    assert auth.check("secret", md, 1000.0 + auth.MAX_SKEW).ok
    assert not auth.check("secret", md, 1001.0 + auth.MAX_SKEW).ok
    assert not auth.check("secret", md, 999.0 - auth.MAX_SKEW).ok


def test_a_proof_does_not_carry_over_to_another_node_name() -> None:
    md = _md(auth.credentials("secret", "a", 7.0))
    md[auth.NODE_KEY] = "b"
    assert not auth.check("secret", md, 7.0).ok


@given(st.text(min_size=1), st.text(min_size=1), st.text(min_size=1))
def test_only_the_same_cookie_verifies(c1: str, c2: str, node: str) -> None:
    v = auth.check(c2, _md(auth.credentials(c1, node, 50.0)), 50.0)
    assert v.ok == (c1 == c2)


def test_an_identity_is_minted_once_per_data_directory(tmp_path: Path) -> None:
    first = load_or_create(tmp_path / "d", "n1@h")
    assert load_or_create(tmp_path / "d", "n1@h") == first  # a restart keeps it
    wiped = load_or_create(tmp_path / "wiped", "n1@h")
    assert wiped.node == "n1@h" and wiped.incarnation != first.incarnation
    assert first.tag.startswith("n1@h#") and len(first.tag) == len("n1@h#") + 16


def test_a_data_directory_of_another_node_is_refused(tmp_path: Path) -> None:
    load_or_create(tmp_path, "n1@h")
    with pytest.raises(IdentityError, match="belongs to node 'n1@h'"):
        load_or_create(tmp_path, "n2@h")
