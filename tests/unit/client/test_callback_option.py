"""`--callback` of a create or an expand: one that is neither an http(s) URL nor a subject is refused
naming the option and both forms (it said `invalid request: url: String should match pattern
'^https?://[^\\s@]+$'`, naming no option)."""

from __future__ import annotations

import pytest

from muster.cli_support import EXIT_INVALID, CliError
from muster.ops_cli import _pool_wait


@pytest.mark.parametrize("given", ["ftp://x", "http://a b", "hello world", "https://user@host/"])
def test_a_callback_of_neither_form_is_refused_naming_the_option(given: str) -> None:
    with pytest.raises(CliError) as err:
        _pool_wait(50, None, given)
    assert err.value.exit_code == EXIT_INVALID
    assert str(err.value).startswith(f"--callback: {given!r} is neither an http(s) URL")
    assert "muster.cb.<tenant>" in str(err.value) and "pattern" not in str(err.value)


def test_either_form_is_taken() -> None:
    by_url = _pool_wait(50, None, "https://hooks.example/muster").callback
    by_subject = _pool_wait(50, None, "muster.cb.acme.ready").callback
    assert by_url is not None and by_url.url == "https://hooks.example/muster"
    assert by_subject is not None and by_subject.subject == "muster.cb.acme.ready"
    assert _pool_wait(50, None, None).callback is None
