"""A hostile or careless caller's sweep of every request subject of docs/asyncapi.json (and the
governance service's `muster.gov.*`) and every write route of docs/openapi.json, against the real
processes `muster up` runs (`Deployment`, one real nats-server), with raw nats-py and aiohttp
clients, not muster's: no body, bytes that are not UTF-8, JSON that is no object, missing and
unknown fields, wrong JSON types, a NUL or a megabyte in a name, negative and enormous numbers, a
wrong content type.

Every one is answered, in time, by a refusal that says why (the field, when one field is wrong);
never "internal error", never a 5xx; nothing reaches the log (the EVENTS stream holds as many
messages after the sweep as before) and no service restarts. Each case is one request, in a few
seconds for all; tests/integration/fuzz/test_bad_input.py searches the operations deeper
(hypothesis), tests/integration/writes/test_fuzz_writes.py the routes (schemathesis)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from yarl import URL

from contracts import subjects
from contracts.catalog_requests import CATALOG_VERBS
from contracts.governance import GOV_VERBS
from contracts.identity import AUTH_VERBS
from muster.bus.connect import connect
from muster.bus.server import NatsServer
from muster.bus.streams import ensure_streams
from muster.bus.wire import close_unconnected
from muster.runtime.supervisor import Deployment
from services.tracker.api import TENANT_HEADER
from services.tracker.contract import document

pytestmark = [pytest.mark.nats, pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

TENANT, PRINCIPAL = "sweep", "sweeper"
UNKNOWN = "00000000-0000-4000-8000-000000000000"
ANSWER_S = 10.0
"""A refusal comes at once; 10 s is for a loaded machine (a request unanswered is a stall)."""


@dataclass
class Sweep:
    nc: Client
    http: aiohttp.ClientSession
    url: str
    deployment: Deployment
    pids: dict[str, int]
    events: int
    seen: list[str] = field(default_factory=list)


async def _events(nc: Client) -> int:
    return (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.messages


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sweep(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Sweep]:
    base = tmp_path_factory.mktemp("sweep")
    server = await NatsServer(base / "nats").start()
    deployment = Deployment(base / "deploy", nats_url=server.url, tenants=TENANT,
                            extra_args={"provisioner": ["--work-dir", str(base / "work")]})
    nc = await connect(server.url, name="sweep")
    http = aiohttp.ClientSession()
    try:
        await ensure_streams(nc.jetstream())
        await deployment.start()
        found = Sweep(nc, http, deployment.tracker_url, deployment, {c.name: c.pid for c in deployment.children}, await _events(nc))
        yield found
        alive = {c.name: c.pid for c in deployment.children if c.process.returncode is None}
        assert alive == found.pids, f"services restarted or died: before {found.pids}, after {alive}"
        print(f"\n[sweep] {len(found.seen)} inputs")
    finally:
        await http.close()
        await nc.close()
        await deployment.stop()
        await server.stop()


# -- the inputs ---------------------------------------------------------------------------------

HUGE = "x" * 1_000_000
GARBAGE: list[tuple[str, bytes]] = [
    ("no body", b""), ("not UTF-8", b"\xff\xfe{\x00}"), ("not JSON", b"{nodes: 3"), ("null", b"null"), ("a list", b"[]"),
    ("a number", b"-1e999"), ("deep", b"[" * 100 + b"]" * 100)]
FIELDS: dict[str, dict[str, Any]] = {
    # (field, wrong value) pairs each request subject is sent alone on top of an empty object.
    "unknown field": {"zzz_unknown": 1},
    "NUL name": {"name": "a\x00b"},
    "huge name": {"name": HUGE},
    "unicode name": {"name": "ñ\u202e\U0001f600"},
    "negative nodes": {"nodes": -1},
    "enormous nodes": {"nodes": 10**40},
    "nodes as text": {"nodes": "3"},
    "list as name": {"name": ["a"]},
}


def bus_subjects() -> list[tuple[str, str]]:
    ops = [(f"ops {v}", subjects.operation(TENANT, PRINCIPAL, v)) for v in (*subjects.OPERATION_VERBS, *CATALOG_VERBS)]
    gov = [(f"gov {v}", subjects.governance_request(TENANT, PRINCIPAL, v)) for v in GOV_VERBS]
    pools = [(f"pool {v}", subjects.pool_command(PRINCIPAL, "any" if v == "check-callback" else "p1", v)) for v in subjects.POOL_VERBS]
    return [*ops, *gov, *pools, ("pools list", subjects.pool_list(PRINCIPAL)), ("solve", subjects.solve_request(TENANT, PRINCIPAL)),
            ("steps", subjects.step_outcomes(TENANT, PRINCIPAL))]


def bus_bodies() -> list[tuple[str, bytes]]:
    return [*GARBAGE, *((what, json.dumps(body).encode()) for what, body in FIELDS.items())]


async def _ask(sweep: Sweep, subject: str, body: bytes) -> str:
    try:
        msg = await sweep.nc.request(subject, body, timeout=ANSWER_S)
    except NatsTimeout:
        return "<no answer>"
    return msg.data.decode("utf-8", "replace")


FIELD_UNSAID: set[tuple[str, str]] = set()
"""(subject, input) pairs whose refusal may leave the field unnamed: none now (a solve request's
enormous `nodes` and a catalog delete's bad `name` were, until session 36)."""
NOT_OURS = ("internal error", "validation error for", "errors.pydantic.dev", "Unable to extract tag", "codec can't decode")
"""pydantic's and Python's own words, which were answers: the notifier's and the solver's
(`1 validation error for GovernanceRequest ...`), a catalog request without `type`."""


def _why(said: str) -> str:
    """The refusal's reason, whatever the answer's type calls it."""
    answer = json.loads(said)
    assert isinstance(answer, dict), said[:300]
    assert answer.get("ok") is not True and answer.get("type") not in ("Accepted", "DryRun", "LayoutSolved"), said[:300]
    return str(answer.get("reason") or answer.get("message") or answer.get("refused") or "")


@pytest.mark.parametrize(("name", "subject"), bus_subjects(), ids=[n for n, _ in bus_subjects()])
async def test_every_request_subject_refuses_bad_input_saying_why(sweep: Sweep, name: str, subject: str) -> None:
    wrong = []
    for what, body in bus_bodies():
        sweep.seen.append(f"{name}: {what}")
        said = await _ask(sweep, subject, body)
        if said == "<no answer>":
            wrong.append(f"{what}: no answer in {ANSWER_S:g} s")
        elif name != "pools list":  # (a read of every pool: it takes no body, and ignores one)
            why = _why(said)
            field_ = None if (name, what) in FIELD_UNSAID else next(iter(FIELDS.get(what, {})), None)
            if not why or any(w in why for w in NOT_OURS) or (field_ is not None and field_ not in why):
                wrong.append(f"{what}: {why[:300]!r}")
    assert wrong == [], name


def write_routes() -> list[tuple[str, str]]:
    routes = []
    for path, methods in document()["paths"].items():
        for method in methods:
            if method in ("post", "put", "delete"):
                routes.append((method.upper(), path))
    return routes


def _filled(path: str) -> str:
    import re

    return re.sub(r"\{[^}]+\}", lambda m: UNKNOWN if m.group(0).endswith("_id}") else ("clustertemplates" if m.group(0) == "{kind}" else "n1"), path)


HTTP_BODIES: list[tuple[str, bytes, str]] = [
    *((what, body, "application/json") for what, body in GARBAGE),
    ("wrong content type", b'{"nodes": 3}', "text/plain"),
    *((what, json.dumps(body).encode(), "application/json") for what, body in FIELDS.items()),
]


@pytest.mark.parametrize(("method", "path"), write_routes(), ids=[f"{m} {p}" for m, p in write_routes()])
async def test_every_write_route_refuses_bad_input_saying_why(sweep: Sweep, method: str, path: str) -> None:
    wrong = []
    for what, body, content_type in HTTP_BODIES:
        sweep.seen.append(f"{method} {path}: {what}")
        async with sweep.http.request(method, sweep.url + _filled(path), data=body,
                                      headers={"Content-Type": content_type, TENANT_HEADER: TENANT}) as resp:
            text = await resp.text()
        if not 400 <= resp.status < 500:  # (a PUT of no body wrote a rule of every default: 200)
            wrong.append(f"{what}: {resp.status} {text[:200]}")
            continue
        error = json.loads(text)["error"]
        why = f"{error['message']} {error.get('parameter')}"
        field_ = next(iter(FIELDS.get(what, {})), None)
        if any(w in why for w in NOT_OURS) or (field_ is not None and field_ not in why and error.get("parameter") != "body"):
            wrong.append(f"{what}: {resp.status} {why[:300]!r}")
    assert wrong == [], f"{method} {path}"


# -- odd names, each otherwise a whole request (session 37's walk) --------------------------------

ODD_NAMES: dict[str, tuple[str, str]] = {
    # what: (the name, the fault each refusal names besides the rule)
    "empty": ("", "it is empty"), "only spaces": ("   ", "character 1 is U+0020 SPACE"),
    "1,000 characters": ("n" * 1000, "it is 1000 characters long"), "NUL": ("a\x00b", "character 2 is U+0000"),
    "newline": ("a\nb", "character 2 is U+000A"), "right-to-left override": ("a\u202eb", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    "zero-width joiner": ("a\u200db", "U+200D ZERO WIDTH JOINER"), "..": ("..", "character 1 is '.'"),
    "/": ("a/b", "character 2 is '/'"), "*": ("*", "character 1 is '*'"), ">": (">", "character 1 is '>'"),
    "a dot": ("a.b", "character 2 is '.'"), "a homoglyph": ("w\u0435b", "character 2 is U+0435 CYRILLIC SMALL LETTER IE"),
}
"""A homoglyph (`wеb`, a Cyrillic `е`) and an invisible character read as a refusal of a name that
looks right until the character at fault was named (contracts.errors.name_fault)."""
WHOLE: dict[str, tuple[str, dict[str, Any]]] = {
    # kind: (its HTTP collection, a body that is whole but for its name)
    "rule": ("rules", {"min_nodes": 3}),
    "policy": ("policies", {"source": 'package muster.p\nimport rego.v1\n\ndeny contains "big" if input.nodes.after > 9\n'}),
    "subscription": ("subscriptions", {"events": ["job_failed"], "subject": f"muster.cb.{TENANT}.news"}),
    "schedule": ("schedules", {"every_s": 3600, "verb": "check", "text": "cluster check c1",
                              "command": {"type": "CheckCluster", "cluster_id": UNKNOWN}}),
}


@pytest.mark.parametrize("kind", WHOLE)
async def test_an_odd_name_is_refused_alike_on_the_bus_and_over_http_naming_the_character_at_fault(sweep: Sweep, kind: str) -> None:
    collection, body = WHOLE[kind]
    wrong = []
    for what, (name, fault) in ODD_NAMES.items():
        sweep.seen.append(f"{kind} named {what}")
        put = json.dumps({"kind": kind, "entities": [{**body, "name": name}]}).encode()
        said = json.loads(await _ask(sweep, subjects.governance_request(TENANT, PRINCIPAL, "put"), put))
        if said.get("ok") is not False or len(said.get("problems", [])) != 1 or "name: " not in said["problems"][0] \
                or fault not in said["problems"][0] or len(said["problems"][0]) > 400:
            wrong.append(f"bus put {what}: {str(said)[:300]}")
        delete = json.dumps({"kind": kind, "name": name}).encode()
        said = json.loads(await _ask(sweep, subjects.governance_request(TENANT, PRINCIPAL, "delete"), delete))
        if said.get("ok") is not False or fault not in said.get("reason", ""):
            wrong.append(f"bus delete {what}: {str(said)[:300]}")
        # (dots escaped and the URL taken as it is: a client resolves a bare `..` segment away)
        path = URL(f"{sweep.url}/v1/governance/{collection}/{quote(name, safe='').replace('.', '%2E')}", encoded=True)
        for method in ("PUT", "DELETE"):
            async with sweep.http.request(method, path, json=body, headers={TENANT_HEADER: TENANT}) as resp:
                error = (await resp.json())["error"]
            if resp.status != 400 or error.get("parameter") != "name" or fault not in error["message"]:
                wrong.append(f"{method} {what}: {resp.status} {error}")
    assert wrong == [], kind


async def test_an_odd_pool_name_in_a_subject_is_refused_naming_the_character_at_fault(sweep: Sweep) -> None:
    """The pool's name is a subject token (`muster.pool.<principal>.<pool>.<verb>`): one a raw
    client sends with a character a name may not have is refused saying which (NATS itself
    refuses an empty token, a space and a wildcard in a publish)."""
    wrong = []
    for what in ("right-to-left override", "zero-width joiner", "a homoglyph", "1,000 characters", "/"):
        name, fault = ODD_NAMES[what]
        sweep.seen.append(f"pool named {what}")
        said = json.loads(await _ask(sweep, subjects.POOL + f".{PRINCIPAL}.{name}.show", b"{}"))
        if said.get("type") != "Rejected" or fault not in said.get("reason", "") or len(said["reason"]) > 400:
            wrong.append(f"{what}: {str(said)[:300]}")
    assert wrong == []


async def test_nothing_reached_the_log(sweep: Sweep) -> None:
    assert sweep.seen, "the sweeps above did not run"
    grew = await _events(sweep.nc) - sweep.events
    written = []
    for seq in range(sweep.events + 1, sweep.events + grew + 1):
        msg = await sweep.nc.jetstream().get_msg(subjects.EVENTS_STREAM, seq)
        written.append(f"{msg.subject} {(msg.data or b'')[:200]!r}")
    assert written == [], "refused requests reached the log"


# -- the auth service, with authorization on ----------------------------------------------------


@dataclass
class AuthSweep:
    nc: Client
    server: NatsServer
    service: Any
    events: int
    seen: list[str] = field(default_factory=list)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def auth_sweep(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AuthSweep]:
    """A server with authorization on and the auth service (the callout and `muster.auth.*`),
    asked as its super admin: a refusal then is the body's, not the requester's rights."""
    from muster.bus.connect import read_credentials_file
    from services.auth.bootstrap import Bootstrap, BootstrapPrincipal
    from services.auth.keys import AuthKeys, server_auth_config
    from services.auth.service import AuthService

    base = tmp_path_factory.mktemp("auth-sweep")
    keys = AuthKeys.load_or_create(base / "keys")
    server = await NatsServer(base / "nats", name="authed", auth=server_auth_config(keys.issuer_public, keys.bus_secret)).start()
    spec = Bootstrap(tenants=(TENANT,), principals=(BootstrapPrincipal(PRINCIPAL, "super_admin", base / "root.cred"),), by="sweep")
    service = await AuthService(server.url, keys, bootstrap=spec).start()
    try:
        nc = await connect(server.url, name="auth-sweep", token=read_credentials_file(base / "root.cred"))
        try:
            found = AuthSweep(nc, server, service, await _events(nc))
            yield found
            print(f"\n[auth sweep] {len(found.seen)} inputs")
        finally:
            await nc.close()
    finally:
        await service.stop()
        await server.stop()


AUTH_FIELDS: dict[str, dict[str, Any]] = {
    **FIELDS,
    "NUL principal": {"principal": "a\x00b"},
    "subject principal": {"principal": "a.*.>"},
    "NUL tenant": {"tenant": "a\x00b"},
    "dotted tenant": {"tenant": "a.b"},
    "unknown role": {"role": "god"},
    "unknown permission": {"permission": "everything"},
    "enormous expires_in_s": {"expires_in_s": 10**40},
    "negative expires_in_s": {"expires_in_s": -1},
    "wildcard token_id": {"token_id": "*"},
    "NUL scope": {"scope": "cluster:a\x00b"},
}
READS_ALONE = ("whoami", "tenant-list", "user-list", "token-list", "token-create")
"""Verbs that take an empty body: `no body` is a whole request of theirs (a token of one's own,
for token-create)."""
TOKEN_SECRET = re.compile(r"mst_[a-z0-9-]+_[0-9a-f]{12}_[0-9a-f]{64}")


@pytest.mark.parametrize("verb", AUTH_VERBS)
async def test_every_auth_request_refuses_bad_input_saying_why(auth_sweep: AuthSweep, verb: str) -> None:
    wrong = []
    bodies = [*GARBAGE, *((what, json.dumps(body).encode()) for what, body in AUTH_FIELDS.items())]
    for what, body in bodies:
        if what == "no body" and verb in READS_ALONE:
            continue
        auth_sweep.seen.append(f"auth {verb}: {what}")
        try:
            msg = await auth_sweep.nc.request(subjects.auth_request(PRINCIPAL, verb), body, timeout=ANSWER_S)
        except NatsTimeout:
            wrong.append(f"{what}: no answer in {ANSWER_S:g} s")
            continue
        said = msg.data.decode("utf-8", "replace")
        if TOKEN_SECRET.search(said):  # (a bad body that made a token: every one here is refused)
            wrong.append(f"{what}: a token in the answer")
            continue
        answer = json.loads(said)
        why = str(answer.get("reason") or "")
        field_ = next(iter(AUTH_FIELDS.get(what, {})), None)
        if answer.get("ok") is not False or not why or any(w in why for w in NOT_OURS) or (field_ is not None and field_ not in why):
            wrong.append(f"{what}: {said[:300]!r}")
    assert wrong == [], verb


CALLOUT_TOKENS: list[tuple[str, str]] = [
    ("empty", ""), ("NUL", "mst_root_0123456789ab_\x00"), ("unicode", "mst_ñ_\u202e\U0001f600"), ("spaces", "mst root token"),
    ("JSON", '{"auth_token": "x"}'), ("a JWT's shape", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."), ("long", "mst_" + "a" * 3000),
    ("wrong secret", f"mst_{PRINCIPAL}_0123456789ab_" + "0" * 64)]


async def test_the_callout_refuses_every_bad_token_and_the_service_answers_on(auth_sweep: AuthSweep) -> None:
    """Each bad token a client can send in its CONNECT is refused, in time, as the server's
    "Authorization Violation"; the auth service answers on, and wrote nothing."""
    wrong = []
    for what, token in CALLOUT_TOKENS:
        auth_sweep.seen.append(f"callout: {what}")
        errors: list[Exception] = []

        async def note(err: Exception, into: list[Exception] = errors) -> None:
            into.append(err)

        nc = Client()
        try:
            await asyncio.wait_for(nc.connect(servers=[auth_sweep.server.url], token=token, allow_reconnect=False,
                                              connect_timeout=int(ANSWER_S), error_cb=note), ANSWER_S * 2)
            wrong.append(f"{what}: connected")
            await nc.close()
        except (OSError, TimeoutError, NatsError) as err:
            said = " ".join(str(e) for e in (*errors, err)).lower()
            if "authorization violation" not in said and "maximum control line" not in said:
                wrong.append(f"{what}: {said[:200]!r}")
        finally:
            await close_unconnected(nc)
    assert wrong == []
    alive = json.loads((await auth_sweep.nc.request(subjects.auth_request(PRINCIPAL, "whoami"), b"{}", timeout=ANSWER_S)).data)
    assert alive["ok"] is True and alive["data"]["principal"] == PRINCIPAL, alive


async def test_no_auth_request_reached_the_log(auth_sweep: AuthSweep) -> None:
    assert auth_sweep.seen, "the auth sweeps above did not run"
    assert await _events(auth_sweep.nc) == auth_sweep.events, "refused auth requests reached the log"
