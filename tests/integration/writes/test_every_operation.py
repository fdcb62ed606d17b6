"""Every operation route over HTTP against a real planner (conftest.py), one cluster through its
life: the catalog applied and deleted, each change previewed (a plan, nothing run), a rolling
one with its tolerance, a rollback's plan, the lease extended under `If-Match`, the cluster
deleted. `test_http_writes.py` has the create, expand, shrink, restart and job control runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import subjects

from .conftest import DEMO, Api, Served

pytestmark = [pytest.mark.nats, pytest.mark.timeout(180)]
WITHOUT_YARN = ["base", "zookeeper-server", "hdfs-namenode", "hdfs-datanode"]
PREVIEWS: dict[str, dict[str, Any]] = {
    "expand": {"nodes": 4},
    "shrink": {"nodes": 2},
    "remove-services": {"services": ["hdfs-datanode"]},
    "configure": {"config": {"hdfs": {"replication": 3}}, "restart": True, "rolling": {"batch": 1}},
    "start": {"services": ["zookeeper-server"]},
    "stop": {},
    "restart": {"rolling": {"batch": 1, "tolerance": 1}},
    "upgrade": {"service": "hdfs-datanode", "rolling": {"batch": "50%"}},
    "check": {},
}


async def _job(api: Api, method: str, path: str, body: Any = None) -> dict[str, Any]:
    status, accepted, headers = await api.call(method, path, "writer", body)
    assert status == 202 and headers["Location"] == accepted["job_url"], accepted
    assert (await api.finished(accepted["job_id"]))["state"] == "succeeded"
    return accepted


async def test_every_operation_over_http_previews_then_runs_as_the_requester(api: Api, served: Served) -> None:
    # The catalog over HTTP: a template with a lease (root may write the catalog; a cluster writer may not).
    template = json.loads((DEMO / "clustertemplates" / "hadoop-small.json").read_text())
    template.update(name="leased", administration={"leaseduration": {"initial": "1h", "max": "1d", "step": "30m"}})
    catalog = {"catalog": {"clustertemplates": {"leased": template}}}
    assert (await api.call("PUT", "/v1/catalog", "writer", catalog))[0] == 403
    # A dry run first (walk of session 22: `catalog apply` had none): checked as the apply is, nothing written.
    before = served.log()
    status, refused, _ = await api.call("PUT", "/v1/catalog?dry_run=true", "writer", catalog)
    assert status == 403 and "catalog would not be applied (dry run)" in refused["error"]["message"], refused
    status, dry, _ = await api.call("PUT", "/v1/catalog?dry_run=true", "root", catalog)
    assert status == 200 and dry["ok"] and dry["dry_run"] and dry["seqs"] == [], dry
    assert [(c["kind"], c["name"], c["action"]) for c in dry["changes"]] == [("clustertemplates", "leased", "add")], dry
    status, bad, _ = await api.call("PUT", "/v1/catalog?dry_run=true", "root",
                                    {"catalog": {"clustertemplates": {"leased": {**template, "extends": "nosuch"}}}})
    assert status == 422 and bad["error"]["message"].startswith("catalog would not be applied (dry run): "), bad
    assert served.log() == before
    status, applied, _ = await api.call("PUT", "/v1/catalog", "root", catalog)
    assert status == 200 and applied["ok"], applied
    made = await _job(api, "POST", "/v1/clusters", {"name": "every", "template": "leased", "nodes": 3, "services": WITHOUT_YARN})
    cluster = f"/v1/clusters/{made['cluster_id']}"
    added = await _job(api, "POST", cluster + "/add-services", {"services": ["yarn-nodemanager", "yarn-resourcemanager"]})

    before = served.log()
    previews = {verb: await api.call("POST", f"{cluster}/{verb}?dry_run=true", "writer", body) for verb, body in PREVIEWS.items()}
    previews["rollback"] = await api.call("POST", cluster + "/rollback?dry_run=true", "writer", {"to_job": added["job_id"]})
    previews["delete"] = await api.call("DELETE", cluster + "?dry_run=true", "writer")
    for verb, (status, preview, _) in previews.items():
        assert status == 200 and preview["operation"] == verb and preview["summary"]["tasks"] > 0, (verb, preview)
    assert previews["restart"][1]["summary"]["rolling"] == {"batches": 3, "tolerance": 1}
    back = {s for group in previews["rollback"][1]["layout"]["layout"] for s in group["services"]}
    assert back == set(WITHOUT_YARN)  # the layout from before the services were added
    grew = {s for s, n in served.log().items() if before.get(s) != n}
    assert grew == {subjects.plan_events("default", p["plan_id"]) for _, p, _ in previews.values()}  # plans saved, nothing run

    # A repair with nothing to repair is the planner's refusal, with its reason.
    status, refused, _ = await api.call("POST", cluster + "/repair", "writer", {})
    assert status == 409 and "no drift to repair" in refused["error"]["message"], refused

    status, shown, headers = await api.call("GET", cluster, "reader")
    assert status == 200 and shown["expires_at"] is not None
    status, stale, _ = await api.call("POST", cluster + "/extend-lease", "writer", {"by_s": 1800}, **{"If-Match": '"1"'})
    assert status == 412 and stale["error"]["parameter"] == "If-Match", stale
    status, lease, _ = await api.call("POST", cluster + "/extend-lease", "writer", {"by_s": 1800}, **{"If-Match": headers["ETag"]})
    assert status == 200 and lease["expires_at"] > shown["expires_at"] and lease["version"] > shown["version"], lease

    deleted = await _job(api, "DELETE", cluster)
    requested = (await api.call("GET", deleted["job_url"], "reader"))[1]
    assert requested["requested_by"] == "writer" and requested["operation"] == "delete"
    status, gone, _ = await api.call("DELETE", "/v1/catalog/clustertemplates/leased", "root")
    assert status == 200 and gone["ok"], gone
