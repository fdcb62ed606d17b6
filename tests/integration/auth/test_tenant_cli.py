"""A tenant's own people do their whole day with their own token (issue #28, decision 0016):
real processes as `muster up` starts them (nats-server with authorization on, the auth service,
planner, solver, provisioner, tracker), two tenants, and the `muster` command run as each
tenant's user. Every reading command works for the user of `acme` through the tracker, scoped
by its grants; `beta`'s user sees nothing of it; refusals exit 4 and say what is missing."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from muster.runtime.supervisor import Deployment
from tests import cli_in_process

from .deployed import DEMO, Ran, auth_requests, deployed

pytestmark = [pytest.mark.nats, pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

@dataclass
class Day:
    deployment: Deployment
    tokens: dict[str, str] = field(repr=False)  # never in test output
    base: Path = Path()

    async def muster(self, who: str, *args: str, shell: str = "", process: bool = False) -> Ran:
        """`muster ARGS` as `who` (its own token only), in the test's process
        (tests/cli_in_process.py), or as a process of its own if `process`, or `muster ARGS
        SHELL` through bash."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_") and k != "NATS_URL"}
        env.update(MUSTER_TOKEN=self.tokens[who], NATS_URL=self.deployment.nats_url or "", COLUMNS="200",
                   MUSTER_TRACKER_URL=self.deployment.tracker_url)
        if not (shell or process):
            ran = Ran(*await cli_in_process.run(args, env, 120))
            assert self.tokens[who] not in ran.out + ran.err
            return ran
        command = [sys.executable, "-m", "muster", *args]
        if shell:
            command = ["bash", "-o", "pipefail", "-c", " ".join(f"'{a}'" for a in command) + " " + shell]
        proc = await asyncio.create_subprocess_exec(*command, env=env, cwd=self.base, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert self.tokens[who] not in (out + err).decode()
        return Ran(proc.returncode or 0, out.decode(), err.decode())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def day(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Day]:
    base = tmp_path_factory.mktemp("tenants")
    async with deployed(base, ("acme", "beta")) as (deployment, nc):  # nc: the session's system identity
        tokens = {"root": deployment.admin_token() or ""}
        ask = auth_requests(nc)
        for user, tenant, grants in (("alice", "acme", ("write", "execute")), ("bob", "beta", ("write", "execute")),
                                     ("carol", "acme", ("read",))):
            tokens[user] = (await ask("user-create", principal=user, tenant=tenant))["token"]
            for permission in grants:
                await ask("grant", principal=user, permission=permission, scope="cluster:*", tenant=tenant)
            await ask("grant", principal=user, permission="read", scope="catalog:*", tenant=tenant)
        yield Day(deployment, tokens, base)


async def test_a_tenants_user_does_its_day_with_its_own_token(day: Day) -> None:
    created = await day.muster("alice", "cluster", "create", "web", "-t", "hadoop-small", "-n", "2", "--wait", "--timeout", "90",
                               process=True)
    assert created.code == 0, created.err
    job = created.out.split("job ")[1].split(",")[0]
    assert f"job {job} succeeded" in created.out

    follow = await asyncio.create_subprocess_exec(  # live: the cluster's events and its new jobs'
        sys.executable, "-m", "muster", "events", "--cluster", "web", "--follow", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=day.base,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}, "MUSTER_TOKEN": day.tokens["alice"],
             "MUSTER_TRACKER_URL": day.deployment.tracker_url, "NATS_URL": day.deployment.nats_url or ""})
    runs = await asyncio.gather(
        day.muster("alice", "cluster", "list"), day.muster("alice", "cluster", "list", "-o", "wide"),
        day.muster("alice", "cluster", "show", "web", "--json"), day.muster("alice", "status", job),
        day.muster("alice", "watch", job), day.muster("alice", "job", "wait", job, "--json"),
        day.muster("alice", "history", job, shell="| head -3"), day.muster("alice", "history", "--cluster", "web", "--json"),
        day.muster("alice", "replay", "--cluster", "web", "--json"), day.muster("alice", "catalog", "get", "services"),
        day.muster("alice", "catalog", "diff", str(DEMO)), day.muster("alice", "catalog", "history", "hadoop-small", "--json"),
        day.muster("alice", "provisioners", "list", "--json"), day.muster("alice", "events"),
    )
    listed, wide, shown, status, watched, waited, head, history, replay, services, diff, catalog_history, provs, everything = runs
    cluster = json.loads(shown.out)
    assert listed.code == 0 and "web" in listed.out and cluster["id"] in listed.out and "│" not in listed.out, listed
    assert listed.out.splitlines()[0].split() == ["NAME", "ID", "STATUS", "TEMPLATE", "NODES", "LAST", "JOB", "EXPIRES"]
    assert wide.code == 0 and "zookeeper-server" in wide.out and "SERVICES" in wide.out, wide
    assert shown.code == 0 and cluster["status"] == "active" and len(cluster["nodes"]) == 2 and cluster["tenant"] == "acme"
    assert status.code == 0 and f"job {job}: succeeded" in status.out, status
    assert watched.code == 0 and watched.out.splitlines()[-1].startswith(f"job {job} succeeded"), watched
    assert waited.code == 0 and json.loads(waited.out.splitlines()[-1])["type"] == "JobSucceeded", waited
    assert head.code == 0 and len(head.out.splitlines()) == 3 and head.err == "", head  # a closed pipe is a normal end
    assert history.code == 0 and {"ClusterRequested", "JobSucceeded"} <= {json.loads(line)["type"] for line in history.out.splitlines()}
    assert replay.code == 0 and json.loads(replay.out)["cluster"]["status"] == "active", replay
    assert services.code == 0 and "zookeeper-server" in services.out, services
    assert "services of tenant 'acme'" in services.out, services  # the token's own, which the tracker says
    assert diff.code == 0 and "~ provider sim (v2): provisioner.latency_ms" in diff.out and "apply would be accepted" in diff.out
    assert catalog_history.code == 0 and json.loads(catalog_history.out.splitlines()[0])["name"] == "hadoop-small"
    [provisioner] = json.loads(provs.out)
    assert provs.code == 0 and provisioner["info"]["tenants"] == ["acme"] and provisioner["others"] == 1, provs
    # The whole tenant's log needs read on the tenant: alice holds grants on its clusters and catalog.
    assert everything.code == 4 and "alice has no read permission on tenant acme" in everything.err, everything

    checked = await day.muster("alice", "cluster", "check", "web", "--wait", "--timeout", "60")
    assert checked.code == 0 and "no drift" in checked.out, checked
    assert follow.stdout is not None
    seen: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(60):
            while not any(e["type"] == "JobSucceeded" and e["event"]["job_id"] != job for e in seen):
                seen.append(json.loads(await follow.stdout.readline()))
    finally:
        follow.terminate()
        await follow.wait()
    assert {e["type"] for e in seen} >= {"ClusterRequested", "ServiceStateObserved"}  # the check job's events came live
    assert all(e["subject"].startswith("muster.evt.acme.") for e in seen)


async def test_another_tenants_user_sees_nothing_and_refusals_say_what_is_missing(day: Day) -> None:
    listed = await day.muster("alice", "cluster", "list", "-o", "json")
    [web] = [c for c in json.loads(listed.out) if c["name"] == "web"]
    runs = await asyncio.gather(
        day.muster("bob", "cluster", "show", "web"), day.muster("bob", "cluster", "show", web["id"]),
        day.muster("bob", "history", web["job_id"]), day.muster("bob", "job", "wait", web["job_id"]),
        day.muster("bob", "events", "--cluster", web["id"]), day.muster("bob", "replay", "--cluster", "web"),
        day.muster("bob", "cluster", "list", "--tenant", "acme"),
        day.muster("bob", "cluster", "create", "x", "-t", "hadoop-small", "-n", "1", "--tenant", "acme"),
        day.muster("bob", "cluster", "list", "-o", "json"), day.muster("bob", "provisioners", "list", "--json"),
        day.muster("root", "cluster", "list", "--tenant", "acme", "-o", "json"),
        day.muster("carol", "cluster", "check", "web"), day.muster("carol", "cluster", "show", "web"),
        day.muster("bob", "planners"), day.muster("bob", "pool", "list"), day.muster("bob", "provisioners", "drain", "provisioner"),
    )
    by_name, by_id, history, wait, events, replay, other_tenant, create_there, own, provs, operator, check, show = runs[:13]
    # Operators' commands read and command on the bus, which refuses a tenant's user: they said
    # "no live planners" (exit 0), or waited and called muster unreachable (exit 3).
    for ran in runs[13:]:
        assert ran.code == 4 and "refused: the bus does not let bob publish to" in ran.err, ran
        assert "this command is for operators" in ran.err and "no live planners" not in ran.out, ran
    # ... and where a tenant's user reads the pools instead (it said only that it may not).
    assert "a tenant's people see the pools through the tracker: GET /v1/pools, the console's pools page" in runs[-2].err
    assert by_name.code == 2 and "no cluster named 'web' in tenant beta" in by_name.err, by_name
    for ran in (by_id, history, wait, events):
        assert ran.code == 2 and "in tenant beta" in ran.err and "web" not in ran.out + ran.err, ran
    assert replay.code == 2 and "no cluster named 'web' in tenant beta" in replay.err
    assert other_tenant.code == 4 and "bob belongs to tenant beta; it cannot ask about tenant 'acme'" in other_tenant.err
    assert create_there.code == 4 and "bob may not send create requests in tenant acme" in create_there.err, create_there
    assert "timed out" not in create_there.err and "unreachable" not in create_there.err
    assert own.code == 0 and json.loads(own.out) == []
    assert provs.code == 0 and all(p["info"]["tenants"] == ["beta"] for p in json.loads(provs.out))
    assert operator.code == 0 and [c["name"] for c in json.loads(operator.out)] == ["web"]
    # A reader of acme's clusters reads them, and may not run anything on them.
    assert show.code == 0 and web["id"] in show.out
    assert check.code == 4 and f"carol has no execute permission on cluster web ({web['id']}) of tenant acme" in check.err, check
    # The grant it names, typed with the cluster's name as every other command takes it (it was
    # refused: "a cluster scope names one cluster by its id").
    granted = await day.muster("root", "grant", "carol", "execute", "--tenant", "acme", "--scope", "cluster:web")
    assert granted.code == 0 and f"granted: execute on acme:cluster:{web['id']} to carol" in granted.out, granted
    unknown = await day.muster("root", "grant", "carol", "execute", "--tenant", "acme", "--scope", "cluster:nope")
    assert unknown.code == 2 and "no cluster named 'nope' in tenant acme" in unknown.err, unknown
    own = await day.muster("carol", "grant", "alice", "read", "--scope", "cluster:nope")  # (it read "in tenant of your token")
    assert own.code == 2 and "no cluster named 'nope' in the tenant of your token" in own.err, own
    # A user of acme who may not read web: by its name it is no cluster at all (its id was named,
    # docs/security.md "What a refusal names"); by its id, the refusal names the grant the
    # operation needs (it named `read`: given that, the operation was refused for `write`).
    saved = day.base / "dave.cred"
    made = await day.muster("root", "user", "create", "dave", "--tenant", "acme", "--save", str(saved))
    assert made.code == 0, made.err
    day.tokens["dave"] = json.loads(saved.read_text())["token"]
    for args, needs in ((("cluster", "expand", "{}", "--add", "1"), "write"), (("cluster", "restart", "{}"), "execute"),
                        (("cluster", "show", "{}"), "read")):
        by_name = await day.muster("dave", *(a.format("web") for a in args))
        assert by_name.code == 2 and "no cluster named 'web' in tenant acme" in by_name.err and web["id"] not in by_name.err, by_name
        ran = await day.muster("dave", *(a.format(web["id"]) for a in args))
        assert ran.code == 4 and f"dave has no {needs} permission on cluster {web['id']} of tenant acme" in ran.err, ran
        assert f"muster grant dave {needs} --scope cluster:{web['id']}" in ran.err and "web" not in ran.err, ran


async def test_a_tenants_log_names_no_other_tenant_its_provisioners_serve(day: Day) -> None:
    """Attack (tenant beta, `muster events --subject 'provisioner.>'`, as `GET /v1/events`): one
    provisioner serves acme and beta, and registers on each tenant's log naming every tenant it
    serves, its host and its process id. The provisioners list counted the others and named
    none; the log's own registration, read through the tracker, named acme."""
    granted = await day.muster("root", "grant", "bob", "read", "--tenant", "beta", "--scope", "tenant")
    assert granted.code == 0, granted
    ran = await day.muster("bob", "events", "--subject", "provisioner.>")
    registrations = [json.loads(line) for line in ran.out.splitlines() if '"ProvisionerRegistered"' in line]
    assert ran.code == 0 and registrations, ran
    assert "acme" not in ran.out, ran.out[:500]
    for r in registrations:
        assert r["subject"].startswith("muster.evt.beta.")
        info = r["event"]["provisioner"]
        assert info["tenants"] == ["beta"] and r["event"]["others"] == 1 and "host" not in info and "pid" not in info, info.keys()
    seen = await day.muster("root", "events", "--tenant", "beta", "--subject", "provisioner.>")  # the operator's log is whole
    assert seen.code == 0 and '"acme"' in seen.out and '"host"' in seen.out, seen
