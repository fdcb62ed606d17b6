"""The notifier reads its secrets file and allow file again on SIGHUP (services/notifier/settings.py):
a secret or a receiver added while it runs is used from then on; a file it cannot read keeps what
it had and says why, never a value. Walk of session 24: both needed a restart of `muster up`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from muster.allowfile import ALLOW_FILE_HEADER
from muster.ports.memory import ManualClock
from muster.runtime.reload import notifier_files
from services.notifier.adapters.delivery import Deliveries
from services.notifier.settings import Settings, reload

T0 = datetime(2026, 11, 30, tzinfo=UTC)


async def test_a_reload_reads_a_new_secret_and_a_new_receiver(tmp_path: Path) -> None:
    secrets, allow = tmp_path / "secrets.json", tmp_path / "allow"
    secrets.write_text("{}")
    allow.write_text(ALLOW_FILE_HEADER)
    settings = Settings(str(secrets), ("10.1.0.0/16",), str(allow))
    deliveries = Deliveries(None, settings.secrets(), ManualClock(T0), allowed=settings.allowed())
    before = deliveries.resolver("acme")
    assert deliveries.secrets.value("acme", "secret://ops-hook")[0] == ""
    assert str(deliveries.allowed) == "10.1.0.0/16"
    secrets.write_text(json.dumps({"@tenants": {"acme": {"@secrets": {"ops-hook": "k1"}}}}))
    allow.write_text(allow.read_text() + "127.0.0.1:9000, acme=hooks.acme.internal  # two receivers\n")
    assert reload(settings, deliveries)
    assert deliveries.secrets.value("acme", "secret://ops-hook") == ("k1", "")
    assert deliveries.secrets.value("beta", "secret://ops-hook")[0] == ""  # (still the tenant's own)
    assert str(deliveries.allowed) == "10.1.0.0/16, 127.0.0.1/32:9000, acme=hooks.acme.internal"
    assert deliveries.resolver("acme") is not before  # a new allowlist, a new checked resolver
    assert deliveries.resolver("acme").allowed.name("hooks.acme.internal")
    await deliveries.close()  # (the retired resolver too)


def test_a_file_it_cannot_read_keeps_what_it_had_and_names_no_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secrets, allow = tmp_path / "secrets.json", tmp_path / "allow"
    secrets.write_text(json.dumps({"@secrets": {"ops-hook": "k1-value"}}))
    allow.write_text("127.0.0.1\n")
    settings = Settings(str(secrets), (), str(allow))
    deliveries = Deliveries(None, settings.secrets(), ManualClock(T0), allowed=settings.allowed())
    secrets.write_text('{"@secrets": {"ops-hook": "k2-value", ')
    assert not reload(settings, deliveries)
    assert deliveries.secrets.value("default", "secret://ops-hook") == ("k1-value", "")
    secrets.write_text(json.dumps({"@secrets": {"ops-hook": "k2-value"}}))
    allow.write_text("alerts.internal:http\n")
    assert not reload(settings, deliveries)
    assert deliveries.secrets.value("default", "secret://ops-hook") == ("k1-value", "")  # all or nothing
    said = capsys.readouterr()
    out = said.out + said.err
    assert "notifier not reloaded" in out and str(allow) in out and "'alerts.internal:http'" in out, out
    assert "k1-value" not in out and "k2-value" not in out


def test_muster_up_gives_the_notifier_files_in_its_data_directory_unless_named(tmp_path: Path) -> None:
    data = tmp_path / ".muster"
    args = notifier_files(data, {})
    assert args == ["--secrets", str(data.resolve() / "notifier-secrets.json"), "--webhook-allow-file", str(data.resolve() / "webhook-allow")]
    assert json.loads((data / "notifier-secrets.json").read_text()) == {}
    (data / "notifier-secrets.json").write_text('{"@secrets": {"a": "b"}}')
    assert notifier_files(data, {}) == args and "b" in (data / "notifier-secrets.json").read_text()  # made once, then kept
    assert notifier_files(data, {"MUSTER_NOTIFIER_SECRETS": "/etc/s.json", "MUSTER_WEBHOOK_ALLOW_FILE": "/etc/allow"}) == []


def test_a_refused_receiver_says_how_a_running_notifier_is_given_it() -> None:
    from muster.destinations import NOTIFIER, POOL, explain

    said = explain("private", "10.0.0.5", None, NOTIFIER, 8080)
    assert "`muster up --webhook-allow 10.0.0.5:8080`, or while it runs a line of its webhook-allow file and `muster reload`" in said
    assert "its webhook-allow file and `muster reload`" in explain("private", "10.0.0.5", None, POOL, 8080)  # (the same file)
