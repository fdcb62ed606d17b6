"""compose.yaml cannot be run here (no Docker), so what `docker compose config` would refuse is
checked without it: the file against the Compose Specification's JSON schema, and every muster
command line in it (with the environment compose gives it) against muster's own parsers.

vendor/compose-spec.json is the compose-spec project's schema as the check-jsonschema 0.39.0 wheel
ships it (its `vendor.compose-spec`), under the Apache 2.0 licence in vendor/compose-spec-LICENSE."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import click
import jsonschema_rs
import pytest
import yaml

from muster.bus import cluster
from muster.cli import main

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((Path(__file__).parent / "vendor" / "compose-spec.json").read_text())
# compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}, ${VAR:+alt}, ${VAR+alt}
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}")


def schema_errors(doc: object) -> list[str]:
    validator = jsonschema_rs.validator_for(SCHEMA)
    return [f"{'.'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_yaml_is_valid_under_the_compose_specification() -> None:
    doc = yaml.safe_load(cluster.render_compose())
    assert schema_errors(doc) == []
    # The schema does refuse: a misspelt key and a command of the wrong shape.
    broken = {**doc, "services": {**doc["services"], "solver": {**doc["services"]["solver"], "comand": ["solver"], "command": [["solver"]]}}}
    errors = schema_errors(broken)
    assert any("comand" in e for e in errors) and any(e.startswith("services.solver") for e in errors), errors


def interpolated(value: str) -> str:
    """A value as compose passes it once the operator's `.env` is there: variables that have a
    default get it, those that must be set (`:?`) get a stand-in."""
    def one(match: re.Match[str]) -> str:
        name, operator, word = match.groups()
        if operator in (":-", "-"):
            return str(word)
        return f"set-by-env-{name}"

    out = VARIABLE.sub(one, value)
    assert "${" not in out and "$" not in out.replace("$$", ""), f"not compose's interpolation: {value!r}"
    return out


def parse(args: list[str]) -> click.Context:
    """`muster ARGS` parsed down to its last subcommand (options, types, choices) without running it."""
    ctx = main.make_context("muster", list(args))
    command: click.Command = main
    while isinstance(command, click.Group):
        name, sub, rest = command.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        assert sub is not None and name is not None, args
        command, ctx = sub, sub.make_context(name, rest, parent=ctx)
    assert not ctx.args, f"muster {' '.join(args)}: left over {ctx.args}"
    return ctx


def muster_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(cluster.render_compose())["services"]
    built = {name: entry for name, entry in services.items() if entry.get("build")}  # the image whose ENTRYPOINT is `muster`
    assert set(services) - set(built) == set(cluster.NODES)  # the rest run the nats image
    return built


@pytest.mark.parametrize("name", sorted(muster_services()))
def test_every_muster_command_line_of_compose_parses_with_musters_own_options(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = muster_services()[name]
    for key in [k for k in os.environ if k.startswith(("MUSTER_", "NATS_"))]:
        monkeypatch.delenv(key)
    for key, value in (entry.get("environment") or {}).items():
        monkeypatch.setenv(key, interpolated(str(value)))  # options read from the environment are parsed too
    mounted = [mount_target(volume) for volume in entry.get("volumes", [])]
    convert = click.Path.convert

    def in_container(self: click.Path, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        # A file the container finds in one of its mounts (a volume another service fills, or a file
        # of this repository: checked below) need not exist on this machine.
        if self.exists and any(str(value).startswith(target + "/") or str(value) == target for target in mounted):
            self = copy.copy(self)
            self.exists = False
        return convert(self, value, param, ctx)

    monkeypatch.setattr(click.Path, "convert", in_container)
    ctx = parse([str(arg) for arg in entry["command"]])
    assert ctx.command.callback is not None


def mount_target(volume: str) -> str:
    source, target = volume.split(":")[:2]
    if source.startswith("./"):
        assert (ROOT / source).exists(), f"{volume}: {source} is not in the repository"
    return target.rstrip("/")


def test_a_command_line_muster_would_refuse_is_found() -> None:
    with pytest.raises(click.UsageError, match="No such option '--max-atempts'"):
        parse(["planner", "--max-atempts", "3"])
    with pytest.raises(click.BadParameter):
        parse(["provisioner", "--capacity", "sixteen"])
    with pytest.raises(click.UsageError, match="No such command"):
        parse(["tls", "isue"])
