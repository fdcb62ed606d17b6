"""One provisioner serving several tenants: a tenant's tasks see its own entries of the secrets
file (`@tenants` → `<tenant>`) and the shared top level, never another tenant's, whatever names
its catalog and its requests use; a task that names what its tenant lacks fails in the same words
whether another tenant has that name or nobody does; what a task returns is masked with the
values of its tenant's own entries too (docs/secrets.md, "Whose secrets")."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contracts.tasks import TaskMessage
from services.notifier.domain.secrets import NotifierSecrets
from services.provisioner.domain.secrets import ProvisionerSecrets, SecretsFileError
from services.provisioner.plugins import PluginError, PluginRegistry
from services.provisioner.plugins.testing import make_task
from tests.unit.provisioner.conftest import echo_provider

ACME_PASSWORD = "acme-cloud-password-41"
ACME_DB = "acme-db-password-93"
SHARED_PASSWORD = "shared-cloud-password-17"
BETA_DB = "beta-db-password-28"

ECHO = '''
from services.provisioner.plugins import ProviderPlugin, succeeded

class Echo(ProviderPlugin):
    async def create(self, ctx):
        seen = {"password": ctx.fields["api_password"], "user": ctx.fields.get("api_user", ""),
                "db": ctx.task.config.get("db", ""), "db_reversed": str(ctx.task.config.get("db", ""))[::-1]}
        return succeeded({"providerid": "e-1", "seen": seen}, stdout=f"logged in with {seen['password']}")
    async def confirm(self, ctx):
        return succeeded({})
    async def delete(self, ctx):
        return succeeded({})
'''

FILE: dict[str, Any] = {
    "shared-cloud": {"api_user": "ops", "api_password": SHARED_PASSWORD},
    "@secrets": {"common": "common-secret-55"},
    "@tenants": {
        "acme": {"aws-prod": {"api_user": "acme-user", "api_password": ACME_PASSWORD},
                 "shared-cloud": {"api_password": ACME_PASSWORD},
                 "@secrets": {"acme-db": ACME_DB, "common": ACME_DB}},
        "beta": {"@secrets": {"beta-db": BETA_DB}},
    },
}


@pytest.fixture
async def reg(tmp_path: Path) -> AsyncIterator[PluginRegistry]:
    r = echo_provider(tmp_path, {"api_user": {"label": "User"},
                                 "api_password": {"label": "Password", "sensitive": True, "required": True}}, ECHO, FILE)
    yield r
    await r.aclose()


def task(tenant: str, provider: str, config: dict[str, Any] | None = None) -> TaskMessage:
    return make_task("create", providertype="echo", provider_name=provider, tenant=tenant, config=config or {})


async def test_a_tenant_gets_its_own_provider_entry_and_no_other_tenant_does(reg: PluginRegistry) -> None:
    mine = await reg.execute(task("acme", "aws-prod"))
    assert mine.ok, mine.error
    assert mine.result["seen"]["user"] == "acme-user" and mine.stdout == "logged in with ********"
    # beta names acme's provider in its own catalog: it gets nothing of acme's, and is told exactly
    # what it would be told if nobody had such an entry.
    theirs = await reg.execute(task("beta", "aws-prod"))
    nobody = await reg.execute(task("beta", "nobody-has-this"))
    assert not theirs.ok and ACME_PASSWORD not in theirs.model_dump_json()
    assert theirs.error == "provider 'aws-prod' (echo): missing required field 'api_password' (Password)"
    assert nobody.error == theirs.error.replace("aws-prod", "nobody-has-this")


async def test_the_top_level_is_every_tenants_and_a_tenants_own_entry_takes_precedence_whole(reg: PluginRegistry) -> None:
    beta = await reg.execute(task("beta", "shared-cloud"))
    assert beta.ok and beta.result["seen"]["user"] == "ops"  # the shared entry: the operator's choice
    acme = await reg.execute(task("acme", "shared-cloud"))
    # acme's own entry replaces the shared one whole: no shared user beside acme's password
    assert acme.ok and acme.result["seen"]["user"] == "" and SHARED_PASSWORD not in acme.model_dump_json()


async def test_a_reference_resolves_to_the_tenants_own_secret_else_the_shared_one_never_anothers(reg: PluginRegistry) -> None:
    own = await reg.execute(task("acme", "aws-prod", {"db": "secret://acme-db"}))
    assert own.ok and own.result["seen"]["db"] == "********"  # resolved (unresolved, the reference shows) and masked
    assert own.result["seen"]["db_reversed"] == ACME_DB[::-1]  # what the plugin had was acme's value
    shared = await reg.execute(task("beta", "shared-cloud", {"db": "secret://common"}))
    assert shared.ok and shared.result["seen"]["db_reversed"] == "common-secret-55"[::-1]
    over = await reg.execute(task("acme", "aws-prod", {"db": "secret://common"}))
    assert over.ok and over.result["seen"]["db_reversed"] == ACME_DB[::-1]  # acme's own `common` wins
    theirs = await reg.execute(task("beta", "shared-cloud", {"db": "secret://acme-db"}))
    nobody = await reg.execute(task("beta", "shared-cloud", {"db": "secret://nobody-db"}))
    assert not theirs.ok and ACME_DB[::-1] not in theirs.model_dump_json()
    assert theirs.error == ("secret 'acme-db' is not in this provisioner's secrets file (under '@secrets', or "
                            "'@tenants' → 'beta' → '@secrets'; docs/secrets.md)")
    assert nobody.error == theirs.error.replace("acme-db", "nobody-db")


async def test_what_a_task_returns_is_masked_with_its_tenants_own_values(reg: PluginRegistry) -> None:
    out = await reg.execute(task("beta", "shared-cloud", {"db": "secret://beta-db"}))
    assert out.ok and BETA_DB not in out.model_dump_json() and out.result["seen"]["db"] == "********"
    out = await reg.execute(task("acme", "aws-prod"))
    assert ACME_PASSWORD not in out.model_dump_json()


def test_the_file_says_whose_each_entry_is_and_a_bad_form_is_named() -> None:
    s = ProvisionerSecrets.of(FILE)
    assert s.provider("acme", "aws-prod")["api_user"] == "acme-user" and s.provider("beta", "aws-prod") == {}
    assert s.named("beta") == {"common": "common-secret-55", "beta-db": BETA_DB}
    assert s.named("gamma") == {"common": "common-secret-55"} and s.lacks("gamma", ["common"]) == ""
    assert s.shared_names() == ["@secrets.common", "shared-cloud"]
    bads: list[tuple[dict[str, Any], str]] = [
        ({"@tenants": []}, "'@tenants' must be an object"),
        ({"@tenants": {"acme": "x"}}, "'@tenants' → 'acme' must be an object"),
        ({"@tenants": {"ac me": {}}}, "tenant 'ac me' is not a valid name"),
        ({"@tenants": {"acme": {"db": 5}}}, "'@tenants' → 'acme': entry 'db' must be an object of a provider's fields, or a "
                                            "string: a named secret, got int"),
        ({"@tenants": {"acme": {"db": "pw", "@secrets": {"db": "pw2"}}}},
         "'@tenants' → 'acme': secret 'db' is given twice, directly under the tenant and under '@secrets': keep one"),
        ({"@tenants": {"acme": {"@secrets": ["db"]}}}, "'@tenants' → 'acme': '@secrets' must be an object of name -> secret"),
        ({"@secrets": "db"}, "secrets: '@secrets' must be an object of name -> secret, got str"),
        ({"@tenants": {"acme": {"@tenants": {}}}}, "'@tenants' is only at the top"),
        ({"aws": "pw"}, "secrets: entry 'aws' must be an object of a provider's fields, got str (a named secret goes "
                        "under '@secrets')"),
    ]
    for bad, said in bads:
        with pytest.raises(SecretsFileError, match=re.escape(said)):
            ProvisionerSecrets.of(bad)


def test_a_bad_tenants_section_stops_the_provisioner_at_start(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="'@tenants' → 'acme': entry 'db' must be an object"):
        PluginRegistry.discover(secrets={"@tenants": {"acme": {"db": ["pw"]}}}, work_dir=tmp_path)


def test_the_notifier_reads_a_tenants_named_secrets_in_the_provisioners_form_too() -> None:
    """One file may serve both: a tenant's named secrets under its own `@secrets`."""
    n = NotifierSecrets.of(FILE)
    assert n.value("acme", "secret://acme-db") == (ACME_DB, "")
    assert n.value("beta", "secret://acme-db")[0] == ""
    assert n.value("acme", "secret://common") == (ACME_DB, "") and n.value("beta", "secret://common")[0] == "common-secret-55"


ONE_FILE: dict[str, Any] = {
    "shared-cloud": {"api_user": "ops", "api_password": SHARED_PASSWORD},
    "@secrets": {"common": "common-secret-55"},
    "@tenants": {
        "acme": {"aws-prod": {"api_user": "acme-user", "api_password": ACME_PASSWORD}, "@secrets": {"acme-db": ACME_DB}},
        "beta": {"beta-hook": "beta-hook-key-61", "common": BETA_DB},  # the notifier's first form: names directly under it
    },
}


def test_one_file_serves_both_each_tenants_named_secrets_in_either_form() -> None:
    """The provisioner read `@tenants` → `<tenant>` → `<name>: "<secret>"` (the notifier's first
    form) as a malformed provider entry and refused to start, while the notifier read it; now
    both read the same named secrets of each tenant from one file (muster/secretsfile.py)."""
    p, n = ProvisionerSecrets.of(ONE_FILE), NotifierSecrets.of(ONE_FILE)
    for tenant in ("acme", "beta", "gamma"):
        named = p.named(tenant)
        assert {name: n.value(tenant, f"secret://{name}")[0] for name in named} == named, tenant
    assert p.named("beta") == {"common": BETA_DB, "beta-hook": "beta-hook-key-61"} and p.provider("beta", "beta-hook") == {}
    assert n.value("acme", "secret://beta-hook")[0] == "" and n.value("acme", "secret://aws-prod")[0] == ""  # not a named secret
    for bad in ({"@tenants": {"acme": {"db": 5}}}, {"@tenants": {"acme": {"db": "a", "@secrets": {"db": "b"}}}}):
        with pytest.raises(SecretsFileError) as by_provisioner:
            ProvisionerSecrets.of(bad, "secrets file s.json")
        with pytest.raises(SecretsFileError) as by_notifier:
            NotifierSecrets.of(bad, "secrets file s.json")
        assert str(by_notifier.value) == str(by_provisioner.value)  # the same words for the same file


async def test_a_task_resolves_a_named_secret_given_directly_under_its_tenant(tmp_path: Path) -> None:
    r = echo_provider(tmp_path, {"api_user": {"label": "User"},
                                 "api_password": {"label": "Password", "sensitive": True, "required": True}}, ECHO, ONE_FILE)
    try:
        flat = await r.execute(task("beta", "shared-cloud", {"db": "secret://beta-hook"}))
        assert flat.ok, flat.error
        assert flat.result["seen"]["db_reversed"] == "beta-hook-key-61"[::-1] and flat.result["seen"]["db"] == "********"
        theirs = await r.execute(task("acme", "shared-cloud", {"db": "secret://beta-hook"}))
        assert not theirs.ok and "secret 'beta-hook' is not in this provisioner's secrets file" in theirs.error
    finally:
        await r.aclose()
