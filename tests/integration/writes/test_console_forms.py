"""The console's forms without a browser (the browser tests drive the same pages in chromium):
a create previewed and applied as the signed-in user; refusals at their fields with nothing in
the log; forms only for those who may use them, and a 403 for a post anyway; CSRF; a stop on one
node, a check and the repair it calls for, each previewed and applied from the cluster page."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from .conftest import Served, job_end

pytestmark = [pytest.mark.nats, pytest.mark.timeout(180)]


class Console:
    def __init__(self, session: aiohttp.ClientSession, served: Served, who: str) -> None:
        self.session, self.served, self.who = session, served, who

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(self.served.url + path, cookies={"muster_session": self.served.tokens[self.who]},
                                    allow_redirects=False) as resp:
            return resp.status, await resp.text()

    async def csrf(self) -> str:
        _, page = await self.get("/ui/clusters")
        found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
        assert found, "no CSRF token on the page"
        return found.group(1)

    async def post(self, path: str, fields: list[tuple[str, str]], csrf: str | None = None) -> tuple[int, str, str]:
        data = [*fields, ("csrf", csrf if csrf is not None else await self.csrf())]
        async with self.session.post(self.served.url + path, data=data, allow_redirects=False,
                                     cookies={"muster_session": self.served.tokens[self.who]},
                                     headers={"Origin": self.served.url}) as resp:
            return resp.status, html.unescape(await resp.text()), resp.headers.get("Location", "")


@pytest_asyncio.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def _create(name: str, nodes: str = "3", **extra: Any) -> list[tuple[str, str]]:
    services = extra.pop("services", ["base", "zookeeper-server", "hdfs-namenode", "hdfs-datanode", "yarn-resourcemanager",
                                      "yarn-nodemanager"])
    return [("step", "preview"), ("template", "hadoop-small"), ("name", name), ("nodes", nodes),
            *(("services", s) for s in services), *((k, v) for k, v in extra.items())]


def _field_error(page: str, field: str) -> str:
    found = re.search(rf'data-testid="error-{field}">([^<]*)<', page)
    assert found, f"no error at {field}: {re.findall(r'data-testid=.error-[a-z]+.>[^<]*', page)}"
    return found.group(1)


async def test_a_writer_previews_and_creates_and_bad_input_is_refused_at_its_field(session: aiohttp.ClientSession,
                                                                                   served: Served) -> None:
    writer = Console(session, served, "writer")
    status, page = await writer.get("/ui/clusters")
    assert status == 200 and 'data-testid="new-cluster"' in page
    status, page = await writer.get("/ui/clusters/new?template=hadoop-small")
    assert status == 200 and 'min="2" max="50"' in page and 'value="hdfs-datanode" checked' in page
    # The solver does not use the template's default hardware (medium; docs/solver.md, "Comparators"):
    # the form does not promise it; the preview's layout shows the solver's choice (small).
    assert "(default medium)" not in page and "the solver chooses (cheapest first)" in page
    assert "the solver chooses (ubuntu22 first)" in page
    status, page = await writer.get("/ui/clusters/new?template=hadoop-smal")  # a mistyped link says so
    assert status == 404 and "there is no template 'hadoop-smal'" in html.unescape(_field_error(page, "template"))
    before = served.log()
    for fields, field, words in (
        (_create("f1", "60"), "nodes", "allows 2 to 50 nodes (its size constraint)"),
        (_create("f1", "three"), "nodes", "not a whole number"),
        (_create("f1", "0"), "nodes", "a cluster has at least one node"),
        (_create("bad name!"), "name", "a cluster's name is letters, digits, '-' and '_' only"),
        (_create("f1", "9" * 5000), "nodes", "a cluster has at most 10,000 nodes (muster's limit"),
        (_create("f1", services=["base", "ghost"]), "services", "unknown services: ghost"),
        (_create("f1", config="{hdfs: 1}"), "config", "not valid JSON"),
        (_create("f1", config='{"hdfs": NaN}'), "config", "NaN is not a JSON number"),  # was stored as null
        (_create("f1", config="[" * 5000), "config", "nests 5,000 levels deep"),  # was a 500 page
        (_create("f1", services=[]), "services", "tick at least one service"),  # was the solver's "no default services"
    ):
        status, page, _ = await writer.post("/ui/clusters/new", fields)
        assert status == 422 and words in _field_error(page, field), (field, status)
    assert served.log() == before
    status, page, _ = await writer.post("/ui/clusters/new", _create("f1"))
    assert status == 200 and "Preview: create cluster f1" in page and 'data-testid="preview-layout"' in page
    assert re.search(r"<td>small</td>\s*<td>ubuntu22</td>", page), "the solver's layout: the cheapest hardware, the template's image"
    plan_id = re.search(r'data-testid="plan-id">([^<]+)<', page).group(1)  # type: ignore[union-attr]
    status, _, location = await writer.post(f"/ui/plans/{plan_id}/apply", [])
    assert status == 303 and location.startswith("/ui/jobs/")
    status, _, again = await writer.post(f"/ui/plans/{plan_id}/apply", [])  # the same plan again: the same job
    assert status == 303 and again == location
    assert (await job_end(session, served, location.rsplit("/", 1)[1]))["state"] == "succeeded"
    status, page = await writer.get(location)  # a finished job offers no pause, resume or cancel
    assert status == 200 and "no job control in state succeeded" in page
    assert all(re.search(rf'value="{verb}"[^>]* hidden>', page) for verb in ("pause", "resume", "cancel", "retry"))


async def test_a_reader_gets_no_forms_and_a_403_for_posting_anyway(session: aiohttp.ClientSession, served: Served) -> None:
    reader = Console(session, served, "reader")
    status, page = await reader.get("/ui/clusters")
    assert status == 200 and "new-cluster" not in page
    cluster = re.search(r'href="/ui/clusters/([0-9a-f-]{36})"', page).group(1)  # type: ignore[union-attr]
    status, page = await reader.get(f"/ui/clusters/{cluster}")
    assert status == 200 and 'data-testid="op-' not in page  # no form; which grant each change needs
    assert f"Delete need write: reader has no write permission on cluster {cluster}" in html.unescape(page)
    assert (await reader.get("/ui/clusters/new"))[0] == 403
    before = served.log()
    status, page, _ = await reader.post("/ui/clusters/new", _create("r1"))
    assert status == 403 and "may not create clusters" in page
    assert "(a tenant admin can give it: muster grant reader write --scope 'cluster:*')" in html.unescape(page)  # as the CLI says
    status, page, _ = await reader.post(f"/ui/clusters/{cluster}/preview", [("op", "expand"), ("nodes", "5")])
    assert status == 403 and "no write permission" in page
    # A change it may not make, with a mistake in its form: refused for the permission (it was a 422
    # telling a reader how to type a rolling batch for a restart it may not run).
    status, page, _ = await reader.post(f"/ui/clusters/{cluster}/preview", [("op", "restart"), ("rolling", "half")])
    assert status == 403 and "restart refused: reader has no execute permission on cluster" in page, status
    # A writer's preview applied by the reader (its plan id shared): refused, and not offered again
    # to be previewed, which would be refused the same way.
    status, page, _ = await Console(session, served, "writer").post(f"/ui/clusters/{cluster}/preview", [("op", "expand"), ("nodes", "5")])
    plan_id = re.search(r'data-testid="plan-id">([^<]+)<', page).group(1)  # type: ignore[union-attr]
    before = served.log()
    status, page, _ = await reader.post(f"/ui/plans/{plan_id}/apply", [])
    assert status == 403 and "no write permission" in page and "Preview again" not in page
    assert served.log() == before


async def test_the_create_form_lists_only_the_templates_its_viewer_may_read(session: aiohttp.ClientSession,
                                                                            served: Served) -> None:
    """As /ui/catalog and `muster catalog get`: one who may create clusters but not read the
    catalog is told why there is no template to pick, and a link to one is no form."""
    maker = Console(session, served, "maker")
    status, page = await maker.get("/ui/clusters/new")
    assert status == 200 and 'data-testid="templates-hidden"' in page and "hadoop-small" not in page
    assert "none you may read" in page and "catalog:*" in html.unescape(page)
    status, page = await maker.get("/ui/clusters/new?template=hadoop-small")
    assert status == 404 and 'data-testid="templates-hidden"' in page and 'value="hadoop-small"' not in page
    status, page = await Console(session, served, "writer").get("/ui/clusters/new")
    assert status == 200 and 'value="hadoop-small"' in page and "templates-hidden" not in page


async def test_a_create_names_a_template_its_requester_may_read_in_the_console_over_http_alike(
        session: aiohttp.ClientSession, served: Served, api: Any) -> None:
    """What the create form offers is what the planner takes: `write` on every cluster without
    `read` on the template was a create the CLI and the API made and the console could not offer.
    Now each refuses it in the same words (403, naming the grant), and records nothing; `read` on
    the one template opens it everywhere, with the services, hardware and image types the
    template names (part of what its reader reads)."""
    maker = Console(session, served, "maker")
    before = served.log()
    status, page, _ = await maker.post("/ui/clusters/new", _create("m1"))
    words = "maker may not create a cluster from template 'hadoop-small': that needs read on catalog:clustertemplates/hadoop-small"
    assert status == 403 and words in html.unescape(_field_error(page, "template")), page
    status, body, _ = await api.call("POST", "/v1/clusters?dry_run=true", "maker",
                                     {"name": "m1", "template": "hadoop-small", "nodes": 3})
    assert status == 403 and words in body["error"]["message"] and body["error"]["parameter"] == "template", body
    assert served.log() == before
    # /v1/catalog said only `complete: false` where the CLI and the console say what is hidden and which grant shows it
    status, body, _ = await api.call("GET", "/v1/catalog", "maker")
    assert status == 200 and body["catalog"] == {} and body["hidden"] >= 13 and not body["complete"], body
    assert "muster grant maker read --scope 'catalog:*'" in body["note"] and "template its creator may read" in body["note"], body
    await served.ask_auth(served.sys_nc, "grant", principal="maker", permission="read",
                          scope="catalog:clustertemplates/hadoop-small", tenant="default")
    status, page = await maker.get("/ui/clusters/new")
    assert status == 200 and 'value="hadoop-small"' in page and 'value="zookeeper-server"' in page, page
    status, page, _ = await maker.post("/ui/clusters/new", _create("m1"))
    assert status == 200 and "Create" in page, page
    status, body, _ = await api.call("POST", "/v1/clusters?dry_run=true", "maker",
                                     {"name": "m1", "template": "hadoop-small", "nodes": 3})
    assert status == 200 and body["plan_id"], body


async def test_posts_need_the_pages_csrf_token(session: aiohttp.ClientSession, served: Served) -> None:
    writer = Console(session, served, "writer")
    for token in ("", "forged"):
        status, page, _ = await writer.post("/ui/clusters/new", _create("c1"), csrf=token)
        assert status == 403 and "CSRF" in page


async def test_a_change_is_previewed_and_a_stale_preview_says_what_changed(session: aiohttp.ClientSession, served: Served) -> None:
    writer = Console(session, served, "writer")
    _, page = await writer.get("/ui/clusters")
    cid = re.search(r'href="/ui/clusters/([0-9a-f-]{36})">f1<', page).group(1)  # type: ignore[union-attr]
    status, page = await writer.get(f"/ui/clusters/{cid}")
    assert status == 200 and all(f'data-testid="op-{op}"' in page for op in ("expand", "shrink", "restart", "configure", "delete"))
    status, page = await writer.get("/ui/clusters/new?template=hadoop-smal")  # a mistyped link says so
    assert status == 404 and "there is no template 'hadoop-smal'" in html.unescape(_field_error(page, "template"))
    before = served.log()
    for fields, field, words in (([("op", "delete"), ("confirm", "f2")], "confirm", "'f2' does not match the cluster's name, f1"),
                                 ([("op", "delete"), ("confirm", "")], "confirm", "type the cluster's name, f1"),
                                 ([("op", "restart"), ("rolling", "half")], "rolling", "neither a number of nodes"),
                                 ([("op", "configure"), ("config", "[1]")], "config", "must be a JSON object"),
                                 ([("op", "expand"), ("nodes", "2")], "nodes", "expand needs more than the cluster's 3 nodes")):
        status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", fields)
        assert status == 422 and words in _field_error(page, field), (fields, status)
    assert served.log() == before
    status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", [("op", "expand"), ("nodes", "4")])
    assert status == 200 and "Preview: expand cluster f1" in page
    assert f'<a href="/ui/clusters/{cid}">f1</a>' in page  # its crumb names it, as the job's page does (it said the id's start)
    plan_id = re.search(r'data-testid="plan-id">([^<]+)<', page).group(1)  # type: ignore[union-attr]
    async with session.post(f"{served.url}/v1/clusters/{cid}/restart", json={},
                            headers={"Authorization": f"Bearer {served.tokens['writer']}"}) as resp:  # the cluster moves on
        assert resp.status == 202
        moved = await resp.json()
    assert (await job_end(session, served, moved["job_id"]))["state"] == "succeeded"
    status, page, _ = await writer.post(f"/ui/plans/{plan_id}/apply", [])
    assert status == 409 and "make a new plan" in page and "Preview again" in page
    again = re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', page)
    status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", [(k, v) for k, v in again if k != "csrf"])
    assert status == 200 and "Preview: expand cluster f1" in page


async def test_a_change_the_page_cannot_offer_is_left_out_said_and_a_post_for_it_anyway_says_why(
        session: aiohttp.ClientSession, served: Served) -> None:
    """A cluster at its template's least size (hadoop-small: 2) with every service it allows:
    no shrink form (it had one whose input's minimum was above its maximum, which the browser
    refused with "Minimum value (2) must be less than the maximum value (1)"), no services to add,
    and the page says why there is no shrink. A post for a form the page does not show (from a
    page made before the cluster changed, or forged) is answered with the reason above the forms:
    it was a 422 page that said nothing."""
    every = ["base", "zookeeper-server", "hdfs-namenode", "hdfs-datanode", "yarn-resourcemanager", "yarn-nodemanager"]
    async with session.post(f"{served.url}/v1/clusters", headers={"Authorization": f"Bearer {served.tokens['writer']}"},
                            json={"name": "f9", "template": "hadoop-small", "nodes": 2, "services": every}) as resp:
        made = await resp.json()
    assert (await job_end(session, served, made["job_id"]))["state"] == "succeeded"
    cid, writer = made["cluster_id"], Console(session, served, "writer")
    status, page = await writer.get(f"/ui/clusters/{cid}")
    offered = set(re.findall(r'data-testid="op-([a-z-]+)"', page))
    assert status == 200 and "expand" in offered and not {"shrink", "add-services"} & offered, offered
    assert "It has 2 nodes, the fewest its template allows (2 to 50): no shrink." in page
    before = served.log()
    for fields, words in (([("op", "add-services"), ("services", "base")], "Add services: "),
                          ([("op", "shrink"), ("nodes", "1")], "Shrink: template 'hadoop-small' allows 2 to 50 nodes"),
                          ([("op", "reboot")], "'reboot' is not an operation the console offers")):
        status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", fields)
        found = re.search(r'data-testid="form-error">([^<]*)<', page)
        assert status == 422 and found and words in found.group(1), (fields, status, found)
    assert served.log() == before


async def test_each_change_on_the_cluster_page_is_previewed_and_a_typed_delete_runs(session: aiohttp.ClientSession,
                                                                                    served: Served) -> None:
    async with session.post(f"{served.url}/v1/clusters", headers={"Authorization": f"Bearer {served.tokens['writer']}"},
                            json={"name": "f3", "template": "hadoop-small", "nodes": 3,
                                  "services": ["base", "zookeeper-server", "hdfs-namenode", "hdfs-datanode"]}) as resp:
        made = await resp.json()
    assert (await job_end(session, served, made["job_id"]))["state"] == "succeeded"
    cid, writer = made["cluster_id"], Console(session, served, "writer")
    status, page = await writer.get(f"/ui/clusters/{cid}")
    offered = set(re.findall(r'data-testid="op-([a-z-]+)"', page))
    assert offered == {"expand", "shrink", "add-services", "remove-services", "start", "stop", "restart", "configure", "upgrade",
                       "check", "repair", "delete"}, offered
    assert 'value="yarn-nodemanager"' in page  # what the template allows and the cluster lacks, to add
    before = served.log()
    for fields, title, shown in (
        ([("op", "shrink"), ("nodes", "2")], "shrink", "Nodes touched"),
        ([("op", "add-services"), ("services", "yarn-nodemanager"), ("services", "yarn-resourcemanager")], "add services", "install"),
        ([("op", "remove-services"), ("services", "hdfs-datanode")], "remove services", "stop"),
        ([("op", "restart"), ("services", "hdfs-datanode"), ("rolling", "1"), ("tolerance", "1")], "restart", "batches, 1 may fail"),
        ([("op", "configure"), ("config", '{"hdfs": {"replication": 1}}'), ("restart", "on"), ("rolling", "50%")], "configure",
         "batches, 0 may fail"),
        ([("op", "upgrade"), ("service", "hdfs-datanode"), ("rolling", "1")], "upgrade a service", "batches, 0 may fail"),
    ):
        status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", fields)
        assert status == 200 and f"Preview: {title} cluster f3" in page and shown in page, (fields, status)
    # Change: back from the (last) preview to its form, as it was typed.
    typed = [(k, v) for k, v in re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', page) if k not in ("csrf", "step")]
    status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", [*typed, ("step", "edit")])
    assert status == 200 and re.search(r'id="op-upgrade" data-testid="op-upgrade" open', page), status
    assert re.search(r'<option selected>hdfs-datanode</option>', page) and 'id="upgrade-rolling" name="rolling"' in page
    assert re.search(r'id="upgrade-rolling"[^>]*value="1"', page)
    # A refused configure keeps what was ticked, and names the field.
    status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", [("op", "configure"), ("config", "{}"), ("restart", "on"),
                                                                        ("rolling", "0")])
    assert status == 422 and "at least one node" in _field_error(page, "rolling") and re.search(r'name="restart" checked', page)
    assert {s for s, n in served.log().items() if before.get(s) != n} <= {s for s in served.log() if ".plan." in s}  # plans only
    status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", [("op", "delete"), ("confirm", "f3")])
    assert status == 200 and "Preview: delete cluster f3" in page and ">Delete</button>" in page
    plan_id = re.search(r'data-testid="plan-id">([^<]+)<', page).group(1)  # type: ignore[union-attr]
    status, _, location = await writer.post(f"/ui/plans/{plan_id}/apply", [])
    assert status == 303 and (await job_end(session, served, location.rsplit("/", 1)[1]))["state"] == "succeeded"
    status, page = await writer.get(f"/ui/clusters/{cid}")
    assert status == 200 and 'data-testid="operations"' not in page  # nothing to change on a deleted cluster


async def test_a_stop_on_one_node_a_check_and_a_repair_are_previewed_and_applied_from_the_page(
        session: aiohttp.ClientSession, served: Served) -> None:
    """The console offered no start, stop, check or repair (a new user's walk, session 20): what
    the CLI does with `muster cluster stop c1 SERVICE --nodes n1000`, `check` and `repair` now
    has its form, previewed first like every change."""
    async with session.post(f"{served.url}/v1/clusters", headers={"Authorization": f"Bearer {served.tokens['writer']}"},
                            json={"name": "f4", "template": "hadoop-small", "nodes": 3,
                                  "services": ["base", "zookeeper-server", "hdfs-namenode", "hdfs-datanode"]}) as resp:
        made = await resp.json()
    assert (await job_end(session, served, made["job_id"]))["state"] == "succeeded"
    cid, writer = made["cluster_id"], Console(session, served, "writer")
    _, page = await writer.get(f"/ui/clusters/{cid}")
    assert 'id="stop-nodes" name="nodes"' in page and "e.g. n1000, n1001" in page

    async def run(fields: list[tuple[str, str]], title: str, shown: str) -> None:
        status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", fields)
        assert status == 200 and f"Preview: {title} cluster f4" in page and shown in page, (fields, status, page[-3000:])
        plan_id = re.search(r'data-testid="plan-id">([^<]+)<', page).group(1)  # type: ignore[union-attr]
        status, _, location = await writer.post(f"/ui/plans/{plan_id}/apply", [])
        assert status == 303 and (await job_end(session, served, location.rsplit("/", 1)[1]))["state"] == "succeeded"
        # The job's page and the jobs list name the cluster as its people do (they said `572eb6ba`).
        _, page = await writer.get(location)
        assert page.count(f'<a href="/ui/clusters/{cid}" title="{cid}">f4</a>') == 2, page[:3000]
        _, page = await writer.get("/ui/jobs")
        assert f'<a href="/ui/clusters/{cid}" title="{cid}">f4</a>' in page

    before = served.log()
    status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", [("op", "stop"), ("services", "zookeeper-server"),
                                                                        ("nodes", "n9999")])
    assert status == 422 and "n9999" in _field_error(page, "nodes") and 'id="stop-nodes" name="nodes" autocomplete="off" value="n9999"' in page
    status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", [("op", "repair")])  # nothing checked yet: no drift
    assert status == 409 and "no drift to repair" in page and 'data-testid="form-error"' in page
    # The page the refusal renders is the cluster's page as its people see it: "a planner", never
    # the planner's instance name (it named it: the refused form's page read the log as an operator's).
    assert "planner-writes" not in page and "a planner" in page
    assert 'action="/ui/clusters/' + cid + '/preview#operations"' in page  # the answer opens where the refusal is said
    assert served.log() == before
    status, page, _ = await writer.post(f"/ui/clusters/{cid}/preview", [("op", "start"), ("nodes", "n1001, n1002")])
    assert status == 200 and "Preview: start services cluster f4" in page
    # Each stage names its services, as `--dry-run` does: the stop of zookeeper-server stops what depends on it.
    await run([("op", "stop"), ("services", "zookeeper-server"), ("nodes", "n1000")], "stop services", "1× stop hdfs-namenode")
    await run([("op", "check")], "check services", "status")
    _, page = await writer.get(f"/ui/clusters/{cid}")
    # A rollback to before the stop, previewed: the select offers the cluster's changes (not its create, nor a check).
    stop_job = re.search(r'<option value="([0-9a-f-]{36})">stop ', page)
    assert stop_job and "<option value" not in page.split('id="rollback-to_job"')[1].split("</select>")[0].split(stop_job.group(0))[1]
    status, preview, _ = await writer.post(f"/ui/clusters/{cid}/preview", [("op", "rollback"), ("to_job", stop_job.group(1))])
    assert status == 200 and "Preview: roll back cluster f4" in preview and "start zookeeper-server" in preview, preview[-3000:]
    row = re.search(r"<tr><th scope=\"row\" class=\"mono\">n1000<.*?</tr>", page, re.S)
    assert row and "zookeeper-server: stopped / stopped" in re.sub(r"<[^>]+>", "", row.group(0)), row


async def test_a_create_with_several_mistakes_is_told_of_each_at_its_field_in_one_preview(
        session: aiohttp.ClientSession, served: Served, api: Any) -> None:
    """Three mistakes were fixed one preview at a time: the first rule's refusal was the only
    one said. Now the console puts each at its field at once, whether the form's own checks
    found some (a name) or only the planner's (node bounds, provider, hardware, template), and
    the API's refusal lists each with its parameter; nothing is written."""
    writer = Console(session, served, "writer")
    before = served.log()
    status, page, _ = await writer.post("/ui/clusters/new", _create("m2", "60", provider="elsewhere", hardwaretype="huge"))
    assert status == 422, status
    assert "allows 2 to 50 nodes (its size constraint)" in _field_error(page, "nodes")
    assert "unknown provider 'elsewhere'" in _field_error(page, "provider")
    assert "unknown hardware type 'huge'" in _field_error(page, "hardwaretype")
    # With a mistake the form finds itself (the planner is not asked: a dry run it admits saves a plan).
    status, page, _ = await writer.post("/ui/clusters/new", _create("bad name!", "60", provider="elsewhere",
                                                                    services=["base", "ghost"], config="{x"))
    assert status == 422, status
    assert "a cluster's name is letters" in _field_error(page, "name") and "not valid JSON" in _field_error(page, "config")
    assert "allows 2 to 50 nodes (its size constraint)" in _field_error(page, "nodes")
    assert "unknown provider 'elsewhere'" in _field_error(page, "provider")
    assert "unknown services: ghost" in _field_error(page, "services")
    status, page, _ = await writer.post("/ui/clusters/new", [("template", "nope") if k == "template" else (k, v) for k, v in
                                                             _create("m2", provider="elsewhere", imagetype="bsd")])
    assert status == 422 and "unknown cluster template 'nope'" in html.unescape(_field_error(page, "template")), status
    assert "unknown provider 'elsewhere'" in _field_error(page, "provider")
    assert "unknown image type 'bsd'" in _field_error(page, "imagetype")
    status, body, _ = await api.call("POST", "/v1/clusters?dry_run=true", "writer",
                                     {"name": "m2", "template": "nope", "nodes": 60, "provider": "elsewhere", "hardwaretype": "huge"})
    error = body["error"]
    assert status == 422 and error["parameter"] == "template", body
    assert [p["parameter"] for p in error["problems"]] == ["template", "provider", "hardwaretype"], body
    assert all(p["message"] in error["message"] for p in error["problems"]), body
    status, body, _ = await api.call("POST", "/v1/clusters?dry_run=true", "writer",
                                     {"name": "m2", "template": "hadoop-small", "nodes": 60, "provider": "elsewhere"})
    assert status == 422 and [p["parameter"] for p in body["error"]["problems"]] == ["nodes", "provider"], body
    assert served.log() == before
