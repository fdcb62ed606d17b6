"""`muster provisioner` as a process: it registers, `provisioners list` shows it, and
`provisioners drain ID` makes it finish, deregister and exit 0. Its work directory defaults to
`.muster/provisioner/<id>`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from contracts import subjects
from muster.bus.connect import connect
from muster.bus.eventstore import EventStore

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]

DEADLINE_S = 30.0


async def _until(stream: asyncio.StreamReader, marker: str, lines: list[str]) -> None:
    while True:
        line = (await stream.readline()).decode()
        if not line:
            raise AssertionError(f"the provisioner exited before {marker!r}:\n{''.join(lines)}")
        lines.append(line)
        if marker in line:
            return


async def _copy(stream: asyncio.StreamReader, lines: list[str]) -> None:
    async for line in stream:
        lines.append(line.decode())


async def _cli(nats_url: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.provisioner.cli", *args, "--nats-url", nats_url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
    return proc.returncode or 0, out.decode()


@pytest.mark.usefixtures("tracker")  # `provisioners list` reads through it
async def test_a_provisioner_process_drains_on_request_and_exits(nats_url: str, tenant: str, tmp_path: Path) -> None:
    pid = f"p-{tenant}"
    # No --nats-url: a service command finds `muster up`'s saved URL as every muster command does.
    env = {**{k: v for k, v in os.environ.items() if k not in ("NATS_URL", "MUSTER_DATA_DIR")}, "MUSTER_LOG_LEVEL": "INFO"}
    (tmp_path / ".muster").mkdir()
    (tmp_path / ".muster" / "nats.url").write_text(nats_url + "\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "provisioner", "--id", pid, "--tenants", tenant,
        "--capacity", "3", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=tmp_path, env=env,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        await asyncio.wait_for(_until(proc.stderr, '"started"', lines), DEADLINE_S)
        copier = asyncio.create_task(_copy(proc.stderr, lines))
        assert (tmp_path / ".muster" / "provisioner" / pid / "keys").is_dir()

        code, out = await _cli(nats_url, "list", "--tenant", tenant, "--json")
        assert code == 0, out
        [record] = json.loads(out)
        assert record["info"]["id"] == pid and record["info"]["capacity"] == 3
        assert {p["name"] for p in record["info"]["plugins"]} >= {"simulated", "shell", "localhost", "static-pool"}

        code, out = await _cli(nats_url, "drain", pid, "--timeout", str(DEADLINE_S))
        assert code == 0, out
        assert f"{pid}: draining, 0 task(s) in flight" in out and f"{pid}: left" in out
        assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == 0, "".join(lines)
        await copier
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()

    nc = await connect(nats_url, name="test")
    try:
        events = await EventStore(nc).read(subjects.provisioner_events(tenant, pid))
    finally:
        await nc.close()
    assert [r.type for r in events] == ["ProvisionerRegistered", "ProvisionerDeregistered"]
    assert events[1].event.reason == "drained"

    code, out = await _cli(nats_url, "drain", pid)
    assert code == 2 and "no live provisioner" in out  # an unknown provisioner is bad input (docs/client.md)


async def test_a_bad_plugin_or_secrets_file_is_bad_input_named_in_one_line(tmp_path: Path) -> None:
    """Refused before it connects: exit 2 (docs/client.md), the file and the field named, never a value."""
    plugin = tmp_path / "plugins" / "echo"
    plugin.mkdir(parents=True)
    (plugin / "plugin.json").write_text(json.dumps({
        "name": "echo", "type": "provider", "version": "1", "actions": ["create"], "entry_point": "provider:Echo",
        "fields": {"token": {"label": "Token", "type": "password", "sensitive": True, "default": "tok-marker-31"}}}))
    (tmp_path / "secrets.json").write_text(json.dumps({"aws": "key-marker-77"}))
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_TOKEN", "MUSTER_CREDENTIALS")}
    for args, expected in ((["--plugins-dir", "plugins"], "Error: plugins/echo/plugin.json: invalid plugin descriptor: field "
                                                         "'fields.token': a sensitive field cannot have a default"),
                           (["--secrets", "secrets.json"], "Error: secrets file secrets.json: entry 'aws' must be an object of a "
                                                     "provider's fields, got str (a named secret goes under '@secrets')")):
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", "provisioner", "--id", "p-bad", *args,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                    cwd=tmp_path, env=env)
        out = (await asyncio.wait_for(proc.communicate(), DEADLINE_S))[0].decode()
        assert proc.returncode == 2 and expected in out, out
        assert "Traceback" not in out and "marker" not in out, out
