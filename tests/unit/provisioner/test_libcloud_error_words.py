"""Libcloud's own errors in a task's words (services/provisioner/plugins/builtin/libcloud_compute/errors.py):
they print as their repr, a driver object's address and a quoted value; said here with the
driver by name, the HTTP status and a bounded start of a body it could not read."""

from __future__ import annotations

from libcloud.common.types import LibcloudError, MalformedResponseError, ProviderError, ServiceUnavailableError
from libcloud.compute.drivers.ec2 import EC2NodeDriver

from services.provisioner.plugins.builtin.libcloud_compute.errors import EXCERPT_CHARS, CloudError, CloudRefused, translate


def test_libcloud_errors_are_said_in_words_never_as_their_repr() -> None:
    driver = EC2NodeDriver("AKIAEXAMPLEEXAMPLE12", "not-a-real-secret")
    cases = [
        (MalformedResponseError("Failed to parse JSON", body="<h3>oops</h3>\n\n  " + "x" * 500, driver=EC2NodeDriver),  # type: ignore[arg-type]  # (as ec2 raises it: the class)
         "list nodes: MalformedResponseError: the cloud's answer is not what libcloud's Amazon EC2 driver reads (Failed to "
         "parse JSON); it began: '<h3>oops</h3> x"),
        (ProviderError("quota exceeded", 500, driver=driver), "list nodes: ProviderError: HTTP 500: quota exceeded (Amazon EC2)"),
        (ServiceUnavailableError(driver=driver), "list nodes: ServiceUnavailableError: HTTP 503: Service unavailable at provider"),
        (LibcloudError("no such zone", driver=None), "list nodes: LibcloudError: no such zone"),
    ]
    for err, said in cases:
        words = str(translate("list nodes", None, err, "aws"))
        assert words.startswith(said), words
        assert " object at 0x" not in words and "<class" not in words and "'quota" not in words
    long = str(translate("list nodes", None, cases[0][0], "aws"))
    assert "x" * EXCERPT_CHARS not in long and "…" in long  # bounded


def test_a_body_echoing_the_request_has_its_credential_looking_values_masked() -> None:
    body = ('{"error": "denied", "Authorization": "Bearer tok-91c2", "password": "hunter2", "token": 1} '
            'X-Amz-Security-Token: sess-3e0a Credential=AKIA/20261202')
    words = str(translate("create node", None, MalformedResponseError("Failed to parse XML", body=body, driver=None), "aws"))
    assert all(s not in words for s in ("hunter2", "tok-91c2", "sess-3e0a", "AKIA/2026")) and '"denied"' in words, words


def test_a_providers_refusal_keeps_its_kind() -> None:
    assert isinstance(translate("create node", None, ProviderError("bad request", 400), "aws"), CloudRefused)
    assert not isinstance(translate("create node", None, ProviderError("later", 503), "aws"), CloudRefused)
    assert isinstance(translate("create node", None, MalformedResponseError("x", body="y"), "aws"), CloudError)
