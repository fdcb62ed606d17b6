"""The pool service and the planners read their allow file again on SIGHUP (`muster reload`,
muster/allowfile.py), as the notifier does: a callback receiver the operator adds while they run
is taken from then on; a file that cannot be read, or has a bad entry, keeps what they had and
says why, naming the file and the entry. Session 25: both read it at start only."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.pools import Callback
from muster.allowfile import ALLOW_FILE_HEADER, AllowSettings, reload_allowed
from muster.runtime.reload import allow_file_args, notifier_files
from services.planner.adapters import NatsCallbackCheck

from .test_callback_destinations import sender

HOOK = Callback(url="http://127.0.0.1:8080/hook")


async def test_the_pool_services_sender_takes_a_receiver_added_to_its_file(tmp_path: Path) -> None:
    allow = tmp_path / "webhook-allow"
    allow.write_text(ALLOW_FILE_HEADER)
    settings = AllowSettings(("10.1.0.0/16",), str(allow))
    s = sender(settings.allowed())
    assert (await s.check(HOOK, "acme"))[0].startswith("127.0.0.1 is a loopback address")
    before = s.checked("acme")
    allow.write_text(allow.read_text() + "127.0.0.1:8080  # the CI's receiver\n")
    assert reload_allowed(settings, s.reconfigure, "pool")
    assert await s.check(HOOK, "acme") == ("", "")
    assert s.checked("acme") is not before and str(s.allowed) == "10.1.0.0/16, 127.0.0.1/32:8080"
    await s.close()  # (the retired resolver too)


def test_the_planners_check_takes_a_receiver_added_to_its_file(tmp_path: Path) -> None:
    allow = tmp_path / "webhook-allow"
    allow.write_text("")
    settings = AllowSettings((), str(allow))
    check = NatsCallbackCheck(None, settings.allowed())  # type: ignore[arg-type]
    assert check.without_pool_service(HOOK, "acme")[0].startswith("127.0.0.1 is a loopback address")
    allow.write_text("acme=127.0.0.1\n")
    assert reload_allowed(settings, check.reconfigure, "planner")
    assert check.without_pool_service(HOOK, "acme") == ("", "")
    assert check.without_pool_service(HOOK, "beta")[0] != ""  # (a tenant's entry: its own)


@pytest.mark.parametrize("service", ["pool", "planner"])
def test_a_file_it_cannot_read_or_a_bad_entry_keeps_what_it_had_and_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], service: str) -> None:
    allow = tmp_path / "webhook-allow"
    allow.write_text("127.0.0.1\n")
    settings = AllowSettings((), str(allow))
    had = settings.allowed()
    got: list[object] = []
    allow.write_text("127.0.0.1\nhooks.internal:http\n")  # all or nothing: the good line is not taken alone
    assert not reload_allowed(settings, got.append, service)
    allow.unlink()
    assert not reload_allowed(settings, got.append, service)
    assert got == [] and str(had) == "127.0.0.1/32"
    said = capsys.readouterr()
    out = said.out + said.err
    assert f"{service} not reloaded" in out and "'hooks.internal:http'" in out and f"{allow}: --webhook-allow" in out, out
    assert f"--webhook-allow-file {allow}: cannot read it" in out, out


def test_muster_up_gives_the_pool_service_and_the_planners_the_notifiers_allow_file(tmp_path: Path) -> None:
    data = tmp_path / ".muster"
    args = allow_file_args(data, {})
    assert args == ["--webhook-allow-file", str(data.resolve() / "webhook-allow")] == notifier_files(data, {})[2:]
    assert (data / "webhook-allow").stat().st_mode & 0o777 == 0o600
    assert allow_file_args(data, {"MUSTER_WEBHOOK_ALLOW_FILE": "/etc/allow"}) == []  # (each reads the variable itself)
