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


@pytest.mark.parametrize(("args", "said"), [
    # Session 32: the service's answer named its fields (`events.0: Input should be 'job_succeeded', ...`,
    # `lease_warning_s: 34560000.0 is over the limit: at most 2592000.0`), not what was typed.
    (["--on", "job_faled"], "--on 'job_faled': 'job_faled' is not a kind of notification; give one or more of "
                            "job_succeeded, job_failed, needs_approval, lease_expiring, drift_found"),
    (["--on", ","], "--on ',': it names no kind of notification"),
    (["--on", "job_failed,drift,leases"], "'drift', 'leases' are not a kind of notification"),
    (["--on", "lease_expiring", "--lease-warning", "400d"], "--lease-warning 400d: more than 0 and at most 30 d"),
    (["--on", "lease_expiring", "--lease-warning", "0"], "--lease-warning 0: more than 0"),
])
def test_notify_add_says_a_kind_or_a_lease_warning_it_cannot_take_in_the_words_typed(args: list[str], said: str) -> None:
    result = CliRunner(env={"NATS_URL": "nats://127.0.0.1:1"}).invoke(
        main, ["notify", "add", "ops", "--subject", "muster.cb.default.x", *args])
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output


@pytest.mark.parametrize(("args", "said"), [
    (["rule", "add", "x", "-o", "delete", "--expires", "400d"], "--expires 400d: more than 0 and at most 30 d"),
    (["rule", "add", "x", "-o", "delete", "--expires", "0"], "--expires 0: more than 0"),
    (["schedule", "create", "s", "--every", "0s", "--", "cluster", "check", "c1"], "--every 0s: at least 1 s and at most 366 d"),
    (["schedule", "create", "s", "--every", "400d", "--", "cluster", "check", "c1"], "--every 400d: at least 1 s"),
])
def test_a_duration_out_of_range_is_refused_in_the_words_typed(args: list[str], said: str) -> None:
    """Session 32: `rule 'x': expires_after_s: 34560000.0 is over the limit: at most 2592000.0`."""
    result = CliRunner(env={"NATS_URL": "nats://127.0.0.1:1"}).invoke(main, args)
    assert result.exit_code == 2 and said in " ".join(result.output.split()), result.output
