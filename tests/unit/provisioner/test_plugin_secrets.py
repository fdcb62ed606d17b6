"""Sensitive provider fields: resolved from the secrets file, never in outcomes or logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog

from services.provisioner.plugins import PluginError, PluginRegistry
from services.provisioner.plugins.testing import make_task

SECRET = "s3cr3t-api-password"
UNDECLARED = "undeclared-secret-value"

LEAKY = '''
from services.provisioner.plugins import ProviderPlugin, succeeded, failed

class Leaky(ProviderPlugin):
    async def create(self, ctx):
        pw = ctx.fields["api_password"]
        return succeeded({"providerid": "x-1", "echo": {"nested": [pw]}, "user": ctx.fields["api_user"]},
                         ipaddresses={"access_v4": "10.0.0.1"}, stdout=f"logged in with {pw}", stderr=f"pw={pw}")
    async def confirm(self, ctx):
        return failed(f"login failed for password {ctx.fields['api_password']} / {ctx.fields.get('other')}")
    async def delete(self, ctx):
        raise RuntimeError(f"cannot delete, token {ctx.fields['api_password']}")
'''


@pytest.fixture
async def reg(tmp_path: Path):
    folder = tmp_path / "p" / "leaky"
    folder.mkdir(parents=True)
    (folder / "plugin.json").write_text(
        json.dumps(
            {
                "name": "leaky",
                "type": "provider",
                "version": "1",
                "actions": ["create", "confirm", "delete"],
                "entry_point": "leaky:Leaky",
                "fields": {
                    "api_user": {"label": "User", "required": True},
                    "api_password": {"label": "Password", "type": "password", "sensitive": True, "required": True},
                },
            }
        )
    )
    (folder / "leaky.py").write_text(LEAKY)
    secrets = {"cloud": {"api_password": SECRET, "other": UNDECLARED}}
    r = PluginRegistry.discover([tmp_path / "p"], secrets=secrets, work_dir=tmp_path / "w")
    yield r
    await r.aclose()


def task(action: str, **kw: object):
    return make_task(action, providertype="leaky", provider_name="cloud", provider_fields={"api_user": "admin"}, **kw)  # type: ignore[arg-type]


async def test_secrets_reach_the_plugin_but_not_the_outcome(reg: PluginRegistry) -> None:
    out = await reg.execute(task("create"))
    assert out.ok
    dumped = out.model_dump_json()
    assert SECRET not in dumped
    assert out.stdout == "logged in with ********"
    assert out.result == {"providerid": "x-1", "echo": {"nested": ["********"]}, "user": "admin"}


async def test_secrets_are_masked_in_errors_and_exceptions(reg: PluginRegistry) -> None:
    out = await reg.execute(task("confirm", results={"providerid": "x-1"}))
    assert not out.ok and SECRET not in out.error and UNDECLARED not in out.error
    assert out.error == "login failed for password ******** / ********"
    out = await reg.execute(task("delete", results={"providerid": "x-1"}))
    assert not out.ok and out.error == "plugin error: RuntimeError: cannot delete, token ********"


async def test_secrets_never_reach_the_log(reg: PluginRegistry, capsys: pytest.CaptureFixture[str]) -> None:
    with structlog.testing.capture_logs() as entries:  # the processors only, put back after
        await reg.execute(task("confirm", results={"providerid": "x-1"}))
        await reg.execute(task("delete", results={"providerid": "x-1"}))
    assert entries, "the registry logs each task"
    assert SECRET not in repr(entries)
    assert SECRET not in capsys.readouterr().out


async def test_a_sensitive_value_sent_in_the_task_is_masked_too(reg: PluginRegistry) -> None:
    t = make_task(
        "create",
        providertype="leaky",
        provider_name="other-cloud",
        provider_fields={"api_user": "admin", "api_password": "sent-over-the-bus"},
    )
    out = await reg.execute(t)
    assert out.ok and "sent-over-the-bus" not in out.model_dump_json()


async def test_missing_required_secret_fails_without_guessing(tmp_path: Path, reg: PluginRegistry) -> None:
    t = make_task("create", providertype="leaky", provider_name="unknown-cloud", provider_fields={"api_user": "a"})
    out = await reg.execute(t)
    assert not out.ok
    assert out.error == "provider 'unknown-cloud' (leaky): missing required field 'api_password' (Password)"


async def test_automator_outcomes_are_masked_with_the_provider_secrets(tmp_path: Path) -> None:
    r = PluginRegistry.discover(secrets={"sim": {"token": "sim-secret-token"}}, work_dir=tmp_path / "w")
    try:
        t = make_task("install", service="base", action_fields={"script": "echo sim-secret-token"})
        out = await r.execute(t)
        assert out.ok and "sim-secret-token" not in out.stdout and "echo ********" in out.stdout
    finally:
        await r.aclose()


def test_short_values_are_not_masked() -> None:
    from services.provisioner.plugins.masking import Masker

    m = Masker(["0", "abc", "long-enough", {"deep": ["nested-secret"]}, True, 12345])
    assert m.text("0 abc long-enough nested-secret 12345") == "0 abc ******** ******** ********"


def test_describe_never_contains_secret_values(reg: PluginRegistry) -> None:
    assert SECRET not in json.dumps(reg.describe())


def test_secrets_must_be_objects(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="secrets: entry 'cloud' must be an object"):
        PluginRegistry.discover(secrets={"cloud": "password"}, work_dir=tmp_path)


async def test_secrets_never_reach_a_span(reg: PluginRegistry, spans: Any) -> None:
    """The plugin's span is exported to a collector: its error is the masked one, and a plugin's
    exception leaves no message or stack (which hold what the plugin put there) on it."""
    from muster import tracing

    with tracing.Tracer("test").span("task"):
        await reg.execute(task("confirm", results={"providerid": "x-1"}))
        await reg.execute(task("delete", results={"providerid": "x-1"}))
    plugin = [s for s in spans.get_finished_spans() if s.name == "plugin leaky"]
    assert len(plugin) == 2 and all(s.status.status_code.name == "ERROR" for s in plugin)
    assert [s.status.description for s in plugin] == ["login failed for password ******** / ********",
                                                       "plugin error: RuntimeError: cannot delete, token ********"]
    for s in spans.get_finished_spans():
        exported = repr((s.attributes, s.status.description, [(e.name, e.attributes) for e in s.events]))
        assert SECRET not in exported and UNDECLARED not in exported, s.name
