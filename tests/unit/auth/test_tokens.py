"""Tokens: made from randomness, parsed strictly, compared in constant time, never logged."""

from __future__ import annotations

import os

import pytest

from contracts.tokens import MAX_TOKEN_CHARS
from services.auth.domain import tokens


def make(principal: str = "alice") -> tuple[str, str, str, str]:
    return tokens.make_token(principal, os.urandom(6), os.urandom(32), os.urandom(16))


def test_a_token_parses_back_and_matches_its_digest_only() -> None:
    token, token_id, salt, digest = make()
    parsed = tokens.parse(token)
    assert (parsed.principal, parsed.token_id) == ("alice", token_id)
    assert tokens.matches(parsed, salt, digest)
    other, *_ = make()
    assert not tokens.matches(tokens.parse(other.replace("_" + tokens.parse(other).token_id + "_", f"_{token_id}_")), salt, digest)
    assert parsed.secret not in digest and parsed.secret not in salt


def test_the_same_secret_with_another_salt_gives_another_digest() -> None:
    assert tokens.digest("00" * 16, "s") != tokens.digest("11" * 16, "s")


@pytest.mark.parametrize("bad, reason", [
    ("", "no token"),
    ("x" * (MAX_TOKEN_CHARS + 1), "too long"),
    ("mst_alice_0123456789ab_" + "0" * 63, "secret part"),
    ("mst_Alice_0123456789ab_" + "0" * 64, "principal part"),
    ("mst_alice_0123456789a_" + "0" * 64, "id part"),
    ("mst_alice_" + "0" * 64, "expected mst_"),
    ("tok_alice_0123456789ab_" + "0" * 64, "expected mst_"),
    ("mst_alice_0123456789ab_" + "0" * 63 + " ", "characters"),
    ("mst_alice_0123456789ab_" + "0" * 63 + "é", "characters"),
])
def test_malformed_tokens_are_refused_with_a_reason_that_never_quotes_them(bad: str, reason: str) -> None:
    with pytest.raises(tokens.TokenError) as err:
        tokens.parse(bad)
    assert reason in str(err.value)
    if len(bad) > 20:
        assert bad not in str(err.value)


def test_non_strings_are_refused() -> None:
    with pytest.raises(tokens.TokenError):
        tokens.parse(None)
    with pytest.raises(tokens.TokenError):
        tokens.parse(b"mst_a")


def test_redact_keeps_principal_and_id_only() -> None:
    token, token_id, *_ = make()
    shown = tokens.redact(token)
    assert shown == f"mst_alice_{token_id}_…"
    assert tokens.parse(token).secret not in shown
    assert tokens.redact("a.b.c") == "<5-character token>"


def test_make_token_checks_its_inputs() -> None:
    with pytest.raises(tokens.TokenError):
        tokens.make_token("Not_valid", os.urandom(6), os.urandom(32), os.urandom(16))
    with pytest.raises(ValueError):
        tokens.make_token("alice", os.urandom(5), os.urandom(32), os.urandom(16))


def test_shapes() -> None:
    token, *_ = make()
    assert tokens.is_builtin(token) and not tokens.looks_like_jwt(token)
    assert tokens.looks_like_jwt("eyJh.eyJi.c2ln") and not tokens.is_builtin("eyJh.eyJi.c2ln")
