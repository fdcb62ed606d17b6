"""`muster notify add` says what is missing or does not belong before it asks anything: one
target (a webhook with its signing key, or a bus subject), and no webhook option on a subject
(they were silently dropped)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from muster.cli import main


@pytest.mark.parametrize(("args", "said"), [
    ([], "give one of --webhook URL (with --secret secret://NAME) and --subject"),
    (["--webhook", "https://hooks.example/x", "--subject", "muster.cb.default.x"], "give one of --webhook URL"),
    (["--webhook", "https://hooks.example/x"], "--webhook needs --secret secret://NAME"),
    (["--subject", "muster.cb.default.x", "--secret", "secret://k"], "--secret is for a webhook"),
    (["--subject", "muster.cb.default.x", "--slack"], "--slack is for a webhook"),
])
def test_notify_add_refuses_a_missing_or_stray_option_before_asking(args: list[str], said: str) -> None:
    result = CliRunner(env={"NATS_URL": "nats://127.0.0.1:1"}).invoke(main, ["notify", "add", "ops", "--on", "job_failed", *args])
    assert result.exit_code == 2 and said in result.output, result.output
