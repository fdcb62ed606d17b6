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
    ("https://hooks.example/x?api_key=1&sig=2&access_token=3", "query parameters 'access_token', 'api_key', 'sig' look like"),
    # Session 33: the credential of well-known webhook URLs, whose names the secrets rule does
    # not take for one (a config's `code` is none): kept in clear in the log and `notify list`.
    ("https://prod-01.westus.logic.azure.com/workflows/1/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers"
     "&sv=1.0&sig=abc", "query parameter 'sig' looks like a credential"),
    ("https://fn.azurewebsites.net/api/hook?code=abc", "query parameter 'code' looks like a credential"),
    ("https://bucket.s3.amazonaws.com/k?X-Amz-Signature=abc", "query parameter 'X-Amz-Signature' looks like"),
    ("https://hooks.example/x#access_token=abc", "has a fragment (`#...`), which a webhook's request never sends"),
    ("https://hooks.example/x#", "has a fragment"),
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


@pytest.mark.parametrize("url", ["ftp://hooks.example/x", "hooks.example/x", "mailto:ops@example.com"])
def test_a_url_no_webhook_posts_to_is_said_so_in_words(url: str) -> None:
    """It said the contract's pattern: `webhook.url: String should match pattern '^(https?|secret)://'`."""
    (problem,) = put(url)
    assert problem.startswith("subscription 'ops': webhook.url: ") and "http:// or https:// (or secret://<name>" in problem
    assert "pattern" not in problem and "hooks.example" not in problem and "ops@" not in problem
    assert ("'ftp' is not" in problem) == url.startswith("ftp")
