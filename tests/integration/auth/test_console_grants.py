"""The console asks the API's grants: a user whose grants cover one cluster sees it
and its jobs, and every page of another cluster of its own tenant answers like an unknown id;
job control is offered and accepted only on jobs the user may execute. Real tokens, a real
nats-server with authorization, the tracker's own app (here rather than in tracker/: the
`authed` fixture that makes principals and grants is this folder's)."""

from __future__ import annotations

import html
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from contracts import subjects
from contracts.catalog import Catalog
from contracts.events import ClusterRequested, JobRequested
from contracts.governance import GovernancePut, Schedule, Subscription
from contracts.notifications import NotificationAttempted
from muster.bus.connect import connect
from muster.bus.eventstore import Append, EventStore
from muster.catalog.store import apply_catalog
from muster.readmodel.locations import job_key
from services.tracker import csrf
from services.tracker.http import make_app
from services.tracker.params import TRACKER

from .conftest import Authed

X, Y = str(uuid.uuid4()), str(uuid.uuid4())
HOOK = Subscription.model_validate({
    "name": "ops", "events": ["job_failed", "lease_expiring"], "webhook": {"url": "https://hooks.example/x", "secret": "secret://ops"},
    "clusters": ["web-*"], "lease_warning_s": 7200}).model_dump(mode="json")  # as the governance service stores it
JOBS = {X: str(uuid.uuid4()), Y: str(uuid.uuid4())}
MADE: dict[str, int] = {}
"""Each cluster's `ClusterRequested` sequence: a point of its history (one past the log's end is refused)."""


@dataclass
class Console:
    http: TestClient
    tokens: dict[str, str] = field(repr=False)  # never in test output

    async def get(self, path: str, who: str) -> tuple[int, str]:
        resp = await self.http.get(path, cookies={"muster_session": self.tokens[who]}, allow_redirects=False)
        return resp.status, await resp.text()

    async def control(self, job: str, who: str) -> dict:
        origin = str(self.http.make_url("")).rstrip("/")
        form = {"action": "pause", "csrf": csrf.token_for(self.tokens[who], "a")}
        resp = await self.http.post(f"/ui/jobs/{job}/control", data=form, cookies={"muster_session": self.tokens[who]},
                                    headers={"Origin": origin, "Accept": "application/json"})
        assert resp.status == 200
        return await resp.json()


@pytest_asyncio.fixture
async def console(authed: Authed) -> AsyncIterator[Console]:
    root = await authed.raw(authed.admin_token, "root")
    tokens = {}
    people = {"onex": {"tenant": "a"}, "ada": {"tenant": "a", "role": "tenant_admin"}, "nogrant": {"tenant": "a"}, "onejob": {"tenant": "a"},
              "tracker": {"role": "service", "service": "tracker"}}
    for pid, fields in people.items():
        made = await authed.ask(root, "root", "user-create", principal=pid, **fields)
        assert made["ok"], made
        tokens[pid] = made["data"]["token"]
    assert (await authed.ask(root, "root", "grant", principal="onex", permission="read", scope=f"cluster:{X}", tenant="a"))["ok"]
    assert (await authed.ask(root, "root", "grant", principal="onex", permission="read", scope="catalog:services/svc-shown", tenant="a"))["ok"]
    assert (await authed.ask(root, "root", "grant", principal="onejob", permission="read", scope=f"job:{JOBS[Y]}", tenant="a"))["ok"]
    await root.close()
    system = await authed.raw(authed.system_token, "sys")
    store = EventStore(system)
    for cluster, job in JOBS.items():
        [MADE[cluster]] = await store.append(subjects.cluster_events("a", cluster), [Append(ClusterRequested(
            tenant="a", cluster_id=cluster, name="c", template="t", provider="p", job_id=job), msg_id=f"c-{cluster}")], expect_last_seq=0)
        await store.append(subjects.job_events("a", job), [Append(JobRequested(
            tenant="a", job_id=job, cluster_id=cluster, operation="create", request={}), msg_id=f"j-{job}")], expect_last_seq=0)
    await apply_catalog(store, "a", Catalog.model_validate({"services": {n: {"name": n, "description": n} for n in ("svc-shown", "svc-hidden")}}))
    await store.append(subjects.governance_events("a", "subscription", "ops"), [Append(GovernancePut(
        kind="subscription", name="ops", version=1, by="ada", entity=HOOK), msg_id="sub-ops")])
    for name, owner in (("mine", "onex"), ("theirs", "ada")):  # (the governance page: onex sees its own)
        schedule = Schedule.model_validate({"name": name, "cron": "0 3 * * *", "verb": "check", "owner": owner,  # as stored
                                            "command": {"type": "CheckCluster", "cluster_id": X}}).model_dump(mode="json")
        await store.append(subjects.governance_events("a", "schedule", name), [Append(GovernancePut(
            kind="schedule", name=name, version=1, by=owner, entity=schedule), msg_id=f"sched-{name}")])
    await store.append(subjects.notification_events("a", "ops"), [Append(NotificationAttempted(
        id="ops-9-job_failed", attempt=2, ok=False, status=503, error="HTTP 503 from https://hooks.example/x", final=False,
        next_at=datetime(2026, 11, 30, 12, tzinfo=UTC)), msg_id="ops-9-2")])
    await system.close()
    nc = await connect(authed.url, name="tracker", token=tokens["tracker"])
    app = make_app(EventStore(nc))
    http = TestClient(TestServer(app))
    await http.start_server()
    index = app[TRACKER].index
    assert index is not None
    await index.mirror.wait_for(lambda: all(index.mirror.get(job_key("a", j)) is not None for j in JOBS.values()), 20)
    yield Console(http, tokens)
    await http.close()
    await nc.close()


def _pages(cluster: str) -> list[str]:
    job = JOBS[cluster]
    return [f"/ui/clusters/{cluster}", f"/ui/clusters/{cluster}/at?seq={MADE[X]}", f"/ui/jobs/{job}", f"/ui/jobs/{job}/graph",
            f"/ui/jobs/{job}/tasks/any-task"]


async def test_a_grant_on_one_cluster_shows_it_and_hides_the_other_like_an_unknown_id(console: Console) -> None:
    for path in _pages(X)[:4]:
        status, page = await console.get(path, "onex")
        # who is signed in, on every page (the header named the tenant alone); a replay fragment has no header
        assert status == 200 and ("<html" not in page or 'signed in as <strong data-testid="viewer">onex</strong>' in page), path
    assert 'signed in as <strong data-testid="viewer">onex</strong>' in (await console.get("/ui/clusters", "onex"))[1]
    other_cluster, other_job = str(uuid.uuid4()), str(uuid.uuid4())
    for path in _pages(Y):  # the same page as for ids that do not exist, ids aside
        status, html = await console.get(path, "onex")
        unknown_status, unknown = await console.get(path.replace(Y, other_cluster).replace(JOBS[Y], other_job), "onex")
        assert status == unknown_status == 404 and "There is no" in html, (path, status)
        assert html.replace(Y, "ID").replace(JOBS[Y], "ID") == unknown.replace(other_cluster, "ID").replace(other_job, "ID"), path
    stream = await console.http.get(f"/ui/jobs/{JOBS[Y]}/stream", cookies={"muster_session": console.tokens["onex"]})
    assert stream.status == 404 and (await stream.json())["error"]["message"] == f"no job {JOBS[Y]} in tenant a"
    for cluster in (Y, other_cluster):  # a cluster's page's stream (cluster_live.py): the same answer for both
        stream = await console.http.get(f"/ui/clusters/{cluster}/stream", cookies={"muster_session": console.tokens["onex"]})
        assert stream.status == 404 and (await stream.json())["error"]["message"] == f"no cluster {cluster} in tenant a"
    for path in ("/ui/clusters", "/ui/jobs"):
        status, html = await console.get(path, "onex")
        assert status == 200 and X in html and Y not in html and JOBS[Y] not in html, path
        status, html = await console.get(path, "ada")  # a tenant admin sees the whole tenant
        assert status == 200 and X in html and Y in html, path


async def test_a_reader_of_one_job_is_not_linked_to_its_cluster_which_it_may_not_read(console: Console) -> None:
    """A grant on a job opens the job, not its cluster: the job's page and the job list linked the
    cluster's name to its page, which answers this reader "There is no cluster ..." (a broken link)."""
    assert (await console.get(f"/ui/clusters/{Y}", "onejob"))[0] == 404
    for path in (f"/ui/jobs/{JOBS[Y]}", "/ui/jobs"):
        status, page = await console.get(path, "onejob")
        assert status == 200 and JOBS[Y] in page and f'href="/ui/clusters/{Y}"' not in page, path
        assert 'data-testid="cluster-unlinked"' in page, path
    status, page = await console.get(f"/ui/jobs/{JOBS[Y]}", "ada")  # who may read the cluster gets the link
    assert status == 200 and f'href="/ui/clusters/{Y}"' in page and "cluster-unlinked" not in page


async def test_job_control_is_only_for_those_who_may_execute_the_job(console: Console) -> None:
    status, html = await console.get(f"/ui/jobs/{JOBS[X]}", "onex")
    assert status == 200 and 'id="control"' not in html  # read only: no buttons; why, with the grant (session 34)
    assert f"Job control (pause, resume, cancel, retry) needs execute: onex has no execute permission on job {JOBS[X]}" in html
    assert "muster grant onex execute --scope cluster:" in html
    assert (await console.control(JOBS[X], "onex")) == {"said": f"rejected: onex may not pause job {JOBS[X]}", "accepted": False,
                                                        "action": "pause"}
    refused = await console.control(JOBS[Y], "onex")  # not readable: the answer for an unknown job
    assert refused["said"] == f"rejected: there is no job {JOBS[Y]} in tenant a" and not refused["accepted"]
    status, html = await console.get(f"/ui/jobs/{JOBS[Y]}", "ada")
    assert status == 200 and 'id="control"' in html


async def test_a_decision_comment_over_the_limit_is_refused_in_our_words_not_cut_short(console: Console) -> None:
    """The console cut a comment at 2,000 characters and sent the rest as if the approver had said
    less; it refuses it instead, saying the field, the length given and the limit."""
    origin = str(console.http.make_url("")).rstrip("/")
    form = {"action": "reject", "comment": "x" * 2345, "csrf": csrf.token_for(console.tokens["ada"], "a")}
    resp = await console.http.post(f"/ui/jobs/{JOBS[X]}/decide", data=form, cookies={"muster_session": console.tokens["ada"]},
                                   headers={"Origin": origin}, allow_redirects=False)
    said = parse_qs(urlsplit(resp.headers["Location"]).query)["said"]
    assert resp.status in (302, 303) and said == ["refused: comment: 2,345 characters given; at most 2,000"], said
    # The page's script asks for JSON and stays on the page, its comment kept (job.js, session 34).
    resp = await console.http.post(f"/ui/jobs/{JOBS[X]}/decide", data=form, cookies={"muster_session": console.tokens["ada"]},
                                   headers={"Origin": origin, "Accept": "application/json"}, allow_redirects=False)
    assert resp.status == 200 and await resp.json() == {"said": "refused: comment: 2,345 characters given; at most 2,000",
                                                        "accepted": False, "action": "reject"}


async def test_the_catalog_page_shows_the_entities_the_viewer_may_read(console: Console) -> None:
    status, html = await console.get("/ui/catalog", "onex")  # read on one service only
    assert status == 200 and "svc-shown" in html and "svc-hidden" not in html
    # What is hidden is said, with the grant that shows it; it was "no catalog yet" to one who reads none.
    assert "1 of the catalog's entities are not shown: onex may not read them" in html and "no catalog yet" not in html
    assert "muster grant onex read --scope 'catalog:*'" in html
    # A kind it reads none of says so under its heading (it was a heading over nothing, or over a
    # table's header row alone).
    assert html.count('data-testid="none-shown">None that onex may read.<') == 4 and 'data-testid="services"' in html
    status, html = await console.get("/ui/catalog", "ada")  # a tenant admin reads the whole catalog
    assert status == 200 and "svc-shown" in html and "svc-hidden" in html


async def test_the_governance_page_says_which_grant_it_needs(console: Console) -> None:
    """Without `read` on the tenant the page was a 403: the viewer's own schedules are shown (as
    `muster schedule list` shows them, walk of session 22), and what the rest needs."""
    status, html = await console.get("/ui/governance", "onex")  # its own tenant's page, which its grants do not open
    assert status == 200 and 'data-testid="governance-partial"' in html and "need read on the tenant" in html, html
    assert "muster grant onex read --scope tenant" in html
    rows = html.count('data-testid="schedule"')
    assert rows == 1 and "<th scope=\"row\">mine</th>" in html and ">theirs<" not in html, html
    assert 'id="h-rules"' not in html and 'id="h-subscriptions"' not in html  # nothing else of the tenant's
    status, html = await console.get("/ui/governance", "ada")
    assert status == 200 and "Governance" in html and "governance-partial" not in html
    assert ">mine<" in html and ">theirs<" in html


async def test_subscriptions_show_their_filters_and_last_delivery_in_the_console_and_over_http(console: Console) -> None:
    """Whether a subscription's deliveries go through was in the log only (`muster events`, super
    admins): the tenant now sees the last one, with the receiver's answer, and which clusters and
    how long before a lease's end it asked for."""
    status, html = await console.get("/ui/governance", "ada")
    row = html[html.index('data-testid="subscription"'):].split("</tr>", 1)[0]
    assert status == 200 and "job_failed, lease_expiring (2 h before a lease ends)" in row and "web-*" in row, row
    assert "failing" in row and "HTTP 503 from https://hooks.example/x" in row and "next try" in row, row
    resp = await console.http.get("/v1/governance/subscriptions", headers={"Authorization": f"Bearer {console.tokens['ada']}"})
    (item,) = (await resp.json())["items"]
    assert resp.status == 200 and item["delivery"]["state"] == "failing" and item["delivery"]["status"] == 503, item


async def test_a_cluster_named_in_the_url_opens_only_for_who_may_read_it(console: Console, authed: Authed) -> None:
    """`/ui/clusters/<name>` opens the cluster of that name (docs/ui.md). Walk of session 24: it
    redirected to the cluster's id whether or not the viewer could read it (the `Location` told a
    user with a grant on one cluster the id of another it may not see; the API names an id only
    to who may read it), and a name of no cluster said `'x' is not a cluster id (a UUID)`, as if
    names were not taken."""
    hidden = str(uuid.uuid4())
    system = await authed.raw(authed.system_token, "sys")
    await EventStore(system).append(subjects.cluster_events("a", hidden), [Append(ClusterRequested(
        tenant="a", cluster_id=hidden, name="secret", template="t", provider="p", job_id=str(uuid.uuid4())),
        msg_id=f"c-{hidden}")], expect_last_seq=0)
    await system.close()
    tracker = console.http.app[TRACKER]
    await tracker.index.mirror.wait_for(lambda: bool(tracker.list_clusters("a", 0, 2, name="secret").items), 20)
    opened = await console.http.get("/ui/clusters/secret", cookies={"muster_session": console.tokens["ada"]}, allow_redirects=False)
    assert opened.status in (302, 303) and opened.headers["Location"] == f"/ui/clusters/{hidden}"
    refused = await console.http.get("/ui/clusters/secret", cookies={"muster_session": console.tokens["onex"]}, allow_redirects=False)
    body = await refused.text()
    assert refused.status == 404 and hidden not in body + refused.headers.get("Location", ""), (refused.status, refused.headers)
    assert "There is no cluster named &#39;secret&#39; in tenant a." in body, body
    status, nothing = await console.get("/ui/clusters/nosuch", "onex")  # the same words as a name nobody took
    assert status == 404 and nothing.replace("nosuch", "secret") == body


async def test_a_viewer_who_may_read_no_cluster_is_told_why_not_that_there_are_none(console: Console) -> None:
    """Walk of session 27: a user of a tenant with clusters, without a grant on them, read "No
    clusters in tenant acme yet. Create one with muster cluster create ...", which it may not do
    either; `muster cluster list` told it the grant to ask for."""
    status, page = await console.get("/ui/clusters", "nogrant")
    said = " ".join(html.unescape(page).split())
    assert status == 200 and X not in page and Y not in page
    assert ("No clusters of tenant a that you may read: nogrant has no read permission on every cluster of tenant a "
            "(a tenant admin can give it: muster grant nogrant read --scope 'cluster:*').") in said, said
    assert " yet." not in said and "Create one" not in said
    status, page = await console.get("/ui/jobs", "nogrant")  # (it said "No jobs in tenant a.")
    said = " ".join(html.unescape(page).split())
    assert status == 200 and JOBS[X] not in page and "No jobs of tenant a that you may read: nogrant has no read permission" in said, said
