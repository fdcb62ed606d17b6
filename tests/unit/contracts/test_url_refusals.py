"""A URL a contract refuses is not repeated in the refusal: it may hold a credential (the
console's governance form showed `'ftp://user:pw@…' is not allowed here`, session 37)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts.errors import problem_text
from contracts.governance import Webhook

SECRET = "hunter2-s3cret"


@pytest.mark.parametrize("url", [f"ftp://ops:{SECRET}@hooks.example.com/x", f"{SECRET}://example.com", f"gopher://{SECRET}"])
def test_a_refused_webhook_url_is_said_without_itself(url: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Webhook(url=url, secret="secret://sign")
    said = [problem_text(p) for p in refused.value.errors() if p["loc"] == ("url",)]
    assert said == ["the URL is not allowed here: give an http:// or https:// URL, or secret://NAME for one in "
                    "the notifier's secrets file"]
    assert SECRET not in said[0]


def test_a_refused_name_is_still_repeated() -> None:
    """(Only URLs are kept back: a name's refusal shows the name, which names the fault.)"""
    from contracts.governance import Policy

    with pytest.raises(ValidationError) as refused:
        Policy(name="a b", source="package x")
    assert "'a b' is not allowed here" in problem_text(refused.value.errors()[0])
