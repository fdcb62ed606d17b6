"""A webhook's URL carries no credential into the log: a user or password before the host, a
query parameter named like a secret, or no host at all are refused at put; a URL that is a
credential itself is given by reference (`secret://<name>`)."""

from __future__ import annotations

import pytest

from muster.destinations import printable
from services.governance.domain.entities import plan_puts


def put(url: str) -> list[str]:
    body = {"name": "ops", "events": ["job_failed"], "webhook": {"url": url, "secret": "secret://ops"}}
    return plan_puts({}, "subscription", [body])[1]


@pytest.mark.parametrize(("url", "said"), [
    ("https://user:pw@hooks.example/x", "carries a user or password before the host"),
    ("https://hooks.example/x?channel=ops&token=abc", "query parameter 'token' looks like a credential"),
    ("https://hooks.example/x?api_key=1&sig=2&access_token=3", "query parameters 'access_token', 'api_key' look like"),
    ("http://", "names no host"),
    ("http://hooks.example:port/x", "cannot be read"),
    ("http://exa mple.com/x", "its URL's host 'exa mple.com' is neither a host name nor an address"),
    ("http://-bad-.example/x", "is neither a host name nor an address"),
    ("secret://", "must be secret://<name>"),
])
def test_a_url_that_would_put_a_credential_in_the_log_is_refused(url: str, said: str) -> None:
    (problem,) = put(url)
    assert problem.startswith("subscription 'ops': webhook.url: its URL") and said in problem
    assert "abc" not in problem and "pw" not in problem


@pytest.mark.parametrize("url", ["https://hooks.example/muster?channel=ops", "http://127.0.0.1:8080/hook", "secret://ops-url",
                                 "http://[::1]:8080/hook", "https://bücher.example/hook", "https://a_b.example./x"])
def test_a_plain_url_or_a_reference_is_taken(url: str) -> None:
    assert put(url) == []


def test_an_error_about_a_url_says_neither_its_query_nor_its_user() -> None:
    assert printable("https://u:pw@hooks.example:8443/x?token=abc") == "https://hooks.example:8443/x"
