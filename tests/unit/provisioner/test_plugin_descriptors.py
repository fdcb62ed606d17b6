"""Discovery of plugin folders and descriptor validation: errors name the file and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.provisioner.plugins import PluginDescriptor, PluginError, PluginRegistry, PluginType

GOOD: dict[str, Any] = {
    "name": "echo",
    "type": "provider",
    "version": "0.1",
    "actions": ["create", "confirm", "delete"],
    "entry_point": "echo:EchoProvider",
    "fields": {"token": {"label": "Token", "sensitive": True, "required": True}},
}

ECHO_CODE = '''
from services.provisioner.plugins import ProviderPlugin, succeeded
from .helper import greeting

class EchoProvider(ProviderPlugin):
    async def create(self, ctx):
        return succeeded({"providerid": "e-1"}, stdout=greeting(ctx.fields["token"]))
    async def confirm(self, ctx):
        return succeeded(stdout="confirmed")
    async def delete(self, ctx):
        return succeeded()
'''


def write_plugin(folder: Path, descriptor: dict[str, Any] | str, code: str = ECHO_CODE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = descriptor if isinstance(descriptor, str) else json.dumps(descriptor)
    (folder / "plugin.json").write_text(text)
    (folder / "echo.py").write_text(code)
    (folder / "helper.py").write_text("def greeting(token):\n    return f'hello with {token}'\n")
    return folder / "plugin.json"


async def test_builtin_plugins_are_discovered(registry: PluginRegistry) -> None:
    kinds = {(d["type"], d["name"]) for d in registry.describe()}
    assert kinds == {
        ("provider", "simulated"),
        ("automator", "simulated"),
        ("provider", "localhost"),
        ("provider", "static-pool"),
        ("provider", "namespaces"),
        ("provider", "libcloud"),
        ("automator", "shell"),
        ("automator", "ansible"),
    }
    assert registry.provider("simulated") is not None
    assert registry.automator("simulated") is not None


async def test_describe_lists_versions_actions_and_fields_without_values(registry: PluginRegistry) -> None:
    sim = next(d for d in registry.describe() if d["type"] == "provider" and d["name"] == "simulated")
    assert sim["version"] == "1.0.0"
    assert sim["actions"] == ["create", "confirm", "delete"]
    assert sim["fields"]["latency_ms"]["label"] == "Latency (ms)"
    assert sim["fields"]["latency_ms"]["sensitive"] is False
    json.dumps(registry.describe())  # goes into the registration as JSON


async def test_extra_plugin_folder_is_loaded_and_can_import_its_own_modules(tmp_path: Path) -> None:
    write_plugin(tmp_path / "plugins" / "echo", GOOD)
    reg = PluginRegistry.discover([tmp_path / "plugins"], work_dir=tmp_path / "w")
    try:
        assert reg.provider("echo") is not None
        echo = next(d for d in reg.describe() if d["name"] == "echo")
        assert echo["fields"]["token"] == {"label": "Token", "type": "text", "required": True, "sensitive": True}
    finally:
        await reg.aclose()


async def test_a_folder_that_is_itself_a_plugin_is_accepted(tmp_path: Path) -> None:
    write_plugin(tmp_path / "echo", GOOD)
    reg = PluginRegistry.discover([tmp_path / "echo"], work_dir=tmp_path / "w")
    await reg.aclose()


async def test_a_relative_work_dir_gives_plugins_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `muster up` starts the provisioner with `--work-dir .muster/provisioner`; the ansible
    # automator wrote its known_hosts path from it, and ansible-playbook, run in a directory of
    # its own, found no such file: every Ansible task failed host key verification.
    monkeypatch.chdir(tmp_path)
    reg = PluginRegistry.discover(work_dir=Path(".muster") / "provisioner")
    try:
        assert reg.work_dir == tmp_path / ".muster" / "provisioner"
        ansible = reg.get(PluginType.AUTOMATOR, "ansible")
        assert ansible is not None and ansible.env.state_dir.is_absolute() and ansible.env.key_dir.is_absolute()
    finally:
        await reg.aclose()


def test_temporary_work_dir_is_removed_on_close(tmp_path: Path) -> None:
    import asyncio

    reg = PluginRegistry.discover()
    assert reg.work_dir.is_dir()
    asyncio.run(reg.aclose())
    assert not reg.work_dir.exists()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"type": "machine"}, "type", "provider"),
        ({"name": "bad name!"}, "name", "'bad name!' is not allowed here: use letters, digits"),
        ({"actions": ["create", "install"]}, "actions", "cannot handle ['install']"),
        ({"actions": []}, "actions", "at least 1"),
        ({"entry_point": "no-colon"}, "entry_point", "pattern"),
        ({"fields": {"x": {"type": "text"}}}, "fields.x.label", "required"),
        ({"fields": {"x": {"label": "X", "type": "colour"}}}, "fields.x.type", "text"),
        ({"fields": {"x": {"label": "X", "type": "select"}}}, "fields.x", "options"),
        ({"fields": {"x": {"label": "X", "sensitive": True, "default": "hunter2"}}}, "fields.x", "sensitive"),
        ({"fields": {"x": {"label": "X", "type": "integer", "default": "ten"}}}, "fields.x", "integer"),
        ({"colour": "blue"}, "colour", "Extra inputs"),
    ],
)
def test_invalid_descriptor_names_file_and_field(tmp_path: Path, change: dict[str, Any], field: str, words: str) -> None:
    path = write_plugin(tmp_path / "p" / "echo", {**GOOD, **change})
    with pytest.raises(PluginError) as err:
        PluginRegistry.discover([tmp_path / "p"], work_dir=tmp_path / "w")
    message = str(err.value)
    assert str(path) in message
    assert f"field '{field}'" in message
    assert words in message


def test_missing_version_is_named(tmp_path: Path) -> None:
    descriptor = {k: v for k, v in GOOD.items() if k != "version"}
    path = write_plugin(tmp_path / "p" / "echo", descriptor)
    with pytest.raises(PluginError, match=rf"{path}: invalid plugin descriptor: field 'version': Field required"):
        PluginRegistry.discover([tmp_path / "p"], work_dir=tmp_path / "w")


@pytest.mark.parametrize(
    ("text", "words"),
    [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object")],
)
def test_unreadable_descriptor_names_file(tmp_path: Path, text: str, words: str) -> None:
    path = write_plugin(tmp_path / "p" / "echo", text)
    with pytest.raises(PluginError, match=words) as err:
        PluginRegistry.discover([tmp_path / "p"], work_dir=tmp_path / "w")
    assert str(path) in str(err.value)


def test_entry_point_that_cannot_be_imported_names_the_field(tmp_path: Path) -> None:
    path = write_plugin(tmp_path / "p" / "echo", {**GOOD, "entry_point": "missing:EchoProvider"})
    with pytest.raises(PluginError, match="field 'entry_point': cannot import module 'missing'") as err:
        PluginRegistry.discover([tmp_path / "p"], work_dir=tmp_path / "w")
    assert str(path) in str(err.value)


def test_entry_point_of_the_wrong_kind_is_rejected(tmp_path: Path) -> None:
    write_plugin(tmp_path / "p" / "echo", {**GOOD, "type": "automator", "actions": ["install"]})
    with pytest.raises(PluginError, match="field 'entry_point'.*not a subclass of AutomatorPlugin"):
        PluginRegistry.discover([tmp_path / "p"], work_dir=tmp_path / "w")


def test_entry_point_class_that_does_not_exist_is_rejected(tmp_path: Path) -> None:
    write_plugin(tmp_path / "p" / "echo", {**GOOD, "entry_point": "echo:Nope"})
    with pytest.raises(PluginError, match="field 'entry_point': 'echo:Nope' is not a subclass"):
        PluginRegistry.discover([tmp_path / "p"], work_dir=tmp_path / "w")


def test_duplicate_plugin_names_the_other_file(tmp_path: Path) -> None:
    dup = write_plugin(tmp_path / "p" / "sim", {**GOOD, "name": "simulated"})
    with pytest.raises(PluginError, match="field 'name': provider plugin 'simulated' is already defined by") as err:
        PluginRegistry.discover([tmp_path / "p"], work_dir=tmp_path / "w")
    assert str(dup) in str(err.value) and "simulated_provider" in str(err.value)


def test_missing_extra_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="does not exist"):
        PluginRegistry.discover([tmp_path / "nowhere"], work_dir=tmp_path / "w")


def test_field_values_are_parsed_from_text_and_defaulted() -> None:
    d = PluginDescriptor.model_validate(
        {
            **GOOD,
            "fields": {
                "n": {"label": "N", "type": "integer", "default": 3},
                "r": {"label": "R", "type": "number"},
                "b": {"label": "B", "type": "boolean"},
                "s": {"label": "S", "type": "select", "options": ["a", "b"]},
                "j": {"label": "J", "type": "json"},
                "pw": {"label": "PW", "type": "password", "sensitive": True, "required": True},
            },
        }
    )
    assert d.type is PluginType.PROVIDER
    got = d.resolve({"r": "0.25", "b": "yes", "s": "b", "j": '[{"host": "h"}]', "pw": "x", "extra": "kept"})
    assert got == {"n": 3, "r": 0.25, "b": True, "s": "b", "j": [{"host": "h"}], "pw": "x", "extra": "kept"}
    with pytest.raises(ValueError, match="missing required field 'pw'"):
        d.resolve({})
    with pytest.raises(ValueError, match="field 's'.*one of"):
        d.resolve({"pw": "x", "s": "c"})
    with pytest.raises(ValueError) as err:
        d.resolve({"pw": {"not": "text"}})
    assert "not" not in str(err.value) and "invalid value" in str(err.value)


async def test_two_folders_with_the_same_plugin_name_do_not_share_code(tmp_path: Path) -> None:
    from services.provisioner.plugins.testing import make_task

    write_plugin(tmp_path / "a" / "echo", GOOD)
    write_plugin(tmp_path / "b" / "echo", GOOD)
    (tmp_path / "b" / "echo" / "helper.py").write_text("def greeting(token):\n    return 'bonjour'\n")
    outs = []
    for folder in ("a", "b"):
        reg = PluginRegistry.discover([tmp_path / folder], secrets={"e": {"token": "a-token"}}, work_dir=tmp_path / f"w{folder}")
        try:
            outs.append((await reg.execute(make_task("create", providertype="echo", provider_name="e"))).stdout)
        finally:
            await reg.aclose()
    assert outs == ["hello with ********", "bonjour"]
