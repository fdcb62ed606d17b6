"""Issue #18.2: a config or catalog field refers to a secret as `secret://<name>`; only the
worker resolves it, from the `@secrets` entry of its secrets file, just before the plugin runs,
and what the task returns is masked with the values it revealed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.testing import make_task
from tests.unit.provisioner.conftest import echo_provider

DB_PASSWORD = "db-pass-7Hq2"
API_TOKEN = "api-token-Zx91"

ECHO = '''
from services.provisioner.plugins import ProviderPlugin, succeeded

class Echo(ProviderPlugin):
    async def create(self, ctx):
        seen = {"db": ctx.task.config["db"]["password"], "token": ctx.fields["token"]}
        return succeeded({"providerid": "e-1", "seen": seen}, stdout=f"connected with {seen}")
    async def confirm(self, ctx):
        return succeeded({})
    async def delete(self, ctx):
        return succeeded({})
'''


@pytest.fixture
async def reg(tmp_path: Path) -> AsyncIterator[PluginRegistry]:
    r = echo_provider(tmp_path, {"token": {"label": "Token", "sensitive": True, "required": True}}, ECHO,
                      {"@secrets": {"db": DB_PASSWORD, "api": API_TOKEN}})
    yield r
    await r.aclose()


def task(config: dict[str, object], token: str = "secret://api") -> object:
    return make_task("create", providertype="echo", provider_name="cloud", provider_fields={"token": token}, config=config)


async def test_references_are_resolved_on_the_worker_and_the_values_masked(reg: PluginRegistry) -> None:
    out = await reg.execute(task({"db": {"password": "secret://db"}}))  # type: ignore[arg-type]
    assert out.ok, out.error
    # The plugin saw both values (the outcome masks them); unresolved, it would echo the references.
    assert out.result["seen"] == {"db": "********", "token": "********"}
    dumped = out.model_dump_json()
    assert DB_PASSWORD not in dumped and API_TOKEN not in dumped and "secret://" not in dumped


async def test_a_secret_the_provisioner_lacks_fails_the_task_naming_it_and_permanently(reg: PluginRegistry) -> None:
    """Permanent: the file is read at start, so no retry here mends it (it was tried 3 times);
    the name, never a value, is in the error."""
    out = await reg.execute(task({"db": {"password": "secret://nope"}}))  # type: ignore[arg-type]
    assert not out.ok and out.permanent
    assert out.error == ("secret 'nope' is not in this provisioner's secrets file (under '@secrets', or '@tenants' → 't1' → "
                         "'@secrets'; docs/secrets.md)")
    assert DB_PASSWORD not in out.model_dump_json() and API_TOKEN not in out.model_dump_json()


async def test_a_lacked_secret_is_retried_while_a_provisioner_that_has_not_tried_it_may_have_it(reg: PluginRegistry) -> None:
    """Another provisioner's secrets file may have it (decision 0039): retried while one that has
    not tried the task serves it; a presence that cannot be read leaves it to the retries too."""
    asked: list[object] = []

    async def another(t: object) -> bool:
        asked.append(t)
        return True

    reg.elsewhere = another
    lacking = task({"db": {"password": "secret://nope"}})
    out = await reg.execute(lacking)  # type: ignore[arg-type]
    assert not out.ok and not out.permanent and len(asked) == 1

    async def unread(_: object) -> bool:
        raise RuntimeError("reading provisioner presence failed: 503")

    reg.elsewhere = unread
    assert not (await reg.execute(lacking)).permanent  # type: ignore[arg-type]

    async def nobody(_: object) -> bool:
        return False

    reg.elsewhere = nobody
    assert (await reg.execute(lacking)).permanent  # type: ignore[arg-type]
    assert (await reg.execute(task({"db": {"password": "secret://db"}}))).ok  # type: ignore[arg-type]
