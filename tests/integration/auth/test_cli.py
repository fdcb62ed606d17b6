"""The identity commands as a user types them: `muster tenant|user|token|grant|revoke|whoami`
with a credentials file, tokens shown once or saved 0600, and clear refusals."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests import cli_in_process

from .conftest import Authed

# 300 s, not the suite's 120: a test here ran up to 16 `muster` processes one after the other,
# each a few seconds of CPU to start, and at load 20 the first test outlasted 120 s (the
# processes it had running then, cut off, failed the next test of the worker with their pipes).
pytestmark = pytest.mark.timeout(300)


async def muster(authed: Authed, *args: str, creds: Path | None = None, token: str | None = None,
                 process: bool = False) -> tuple[int, str, str]:
    """`muster ARGS` with the credentials file or token given: in the test's process
    (tests/cli_in_process.py), or as a process of its own if `process`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUSTER_TOKEN", "MUSTER_CREDENTIALS")}
    env["NATS_URL"] = authed.url
    # No tracker here (a deployment of the machine's own on the default port would answer)
    env["MUSTER_TRACKER_URL"] = "http://127.0.0.1:9"
    if creds is not None:
        env["MUSTER_CREDENTIALS"] = str(creds)
    if token is not None:
        env["MUSTER_TOKEN"] = token
    if not process:
        return await cli_in_process.run(args, env, 60)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "muster", *args, env=env, cwd=authed.folder,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_identities_from_the_command_line(authed: Authed) -> None:
    root = authed.folder / "root.cred"
    # a real process for the identity commands (the others run in the test's process)
    code, out, _ = await muster(authed, "whoami", "--json", creds=root, process=True)
    assert code == 0 and json.loads(out)["role"] == "super_admin"
    code, out, _ = await muster(authed, "tenant", "create", "acme", creds=root)
    # No provisioner serves a new tenant unasked: the command says which grant makes one.
    assert code == 0 and "muster grant PROVISIONER execute --tenant acme --scope queue:default" in out  # none here yet
    assert "no provisioner has an identity yet" in out
    ada = authed.folder / "ada.cred"
    code, out, err = await muster(authed, "user", "create", "ada", "--tenant", "acme", "--role", "tenant_admin",
                                  "--save", str(ada), creds=root)
    assert code == 0 and stat.S_IMODE(ada.stat().st_mode) == 0o600 and "mst_" not in out + err
    assert f"saved to {ada} (mode 0600)" in out  # one line in a pipe, however long the path
    code, out, err = await muster(authed, "user", "create", "alice", "--expires", "1d", creds=ada)
    assert code == 0 and out.startswith("mst_alice_") and "shown once" in err
    alice = out.strip()
    code, out, _ = await muster(authed, "grant", "alice", "write", "--scope", "cluster:*", creds=ada)
    assert code == 0 and "write on acme:cluster:*" in out
    code, _, err = await muster(authed, "grant", "alice", "read", "--scope", "cluster:*.>", creds=ada)
    assert code == 2 and "names one cluster by its id (a UUID" in err  # refused before it is sent
    code, out, _ = await muster(authed, "whoami", "--json", token=alice)
    who = json.loads(out)
    assert who["tenant"] == "acme" and who["grants"] == [{"permission": "write", "scope": "acme:cluster:*"}]
    # A tenant admin stays inside its tenant; a user does not administer.
    code, _, err = await muster(authed, "grant", "alice", "read", "--tenant", "a", creds=ada)
    assert code == 4 and "belongs to tenant acme" in err
    code, _, err = await muster(authed, "tenant", "create", "evil", token=alice)
    assert code == 4 and "only a super admin creates tenants" in err
    # Revoked: the bus refuses, and says what it may mean; the token is never echoed.
    token_id = alice.split("_")[2]
    assert (await muster(authed, "token", "revoke", token_id, creds=ada))[0] == 0
    code, out, err = await muster(authed, "whoami", token=alice, process=True)
    assert code == 4 and "the bus refused the token from $MUSTER_TOKEN" in err and alice not in out + err
    # whoami says which it may be (no tracker runs here to say) and the way on, not "`muster
    # whoami` asks the tracker which"
    assert "expired or revoked" in err and "muster token create --for alice --save FILE" in err
    assert "muster whoami" not in err
    # Every command on the bus says the same (it said "`muster whoami` asks the tracker which"
    # and left the way on to that second command: walk of session 26), an operation and a
    # governance request alike.
    for args in (("cluster", "create", "c", "-t", "t", "-n", "1"), ("schedule", "list")):
        code, out, err = await muster(authed, *args, token=alice)
        assert code == 4 and "the bus refused the token from $MUSTER_TOKEN" in err and alice not in out + err, (args, err)
        assert "muster token create --for alice --save FILE" in err and "muster whoami" not in err, (args, err)


async def test_a_credentials_file_readable_by_others_is_refused(authed: Authed) -> None:
    loose = authed.folder / "loose.cred"
    loose.write_text((authed.folder / "root.cred").read_text())
    loose.chmod(0o644)
    code, out, err = await muster(authed, "whoami", creds=loose)
    assert code == 2 and "readable by others" in err and "chmod 600" in err
