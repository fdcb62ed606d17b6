"""Issue #18.2: a cluster request with `config.db_password` was stored in clear and served by
/v1/jobs/{id}/events. A secret in clear anywhere in a request is refused (naming where, never
what) before anything reads it; a reference to a named secret is accepted as it is."""

from __future__ import annotations

import json

from planner_harness import Harness

from contracts.commands import Accepted, ConfigureCluster, CreateCluster, Rejected


async def test_a_secret_in_clear_anywhere_in_a_request_is_refused_and_nothing_is_stored(h: Harness) -> None:
    body = {"name": "c1", "template": "hadoop-small", "nodes": 2,
            "config": {"db": {"db_password": "hunter22"}, "ok": 1}, "extra": [{"ssh_key": "k"}]}
    before = len(h.log.records)
    reply = await h.send_raw("create", json.dumps(body).encode())
    assert isinstance(reply, Rejected) and len(h.log.records) == before
    assert reply.reason.startswith("the request carries what looks like a secret in clear at config.db.db_password, "
                                   "extra[0].ssh_key: the log would keep it forever; give it as a reference")
    assert "hunter22" not in reply.reason


async def test_a_reference_to_a_named_secret_is_accepted_and_stored_as_a_reference(h: Harness) -> None:
    reply = await h.send(CreateCluster(name="c1", template="hadoop-small", nodes=2, config={"db": {"password": "secret://db"}}))
    assert isinstance(reply, Accepted), reply
    await h.settle()
    assert h.cluster(reply.cluster_id).config["db"] == {"password": "secret://db"}
    refused = await h.send(ConfigureCluster(cluster_id=reply.cluster_id, config={"db": {"password": "plain"}}))
    assert isinstance(refused, Rejected) and "config.db.password" in refused.reason
