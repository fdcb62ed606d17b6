"""The checked-in AsyncAPI document is what `contracts/` generates, and it is complete."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from contracts import asyncapi, subjects
from contracts.commands import COMMAND_ADAPTER, VERB_OF
from contracts.events import EVENT_TYPES

DOC = Path(__file__).parents[3] / "docs" / "asyncapi.json"


def _doc() -> dict[str, Any]:
    return json.loads(DOC.read_text(encoding="utf-8"))


def test_the_checked_in_document_matches_the_models() -> None:
    assert DOC.read_text(encoding="utf-8") == asyncapi.render(), (
        "docs/asyncapi.json is stale: regenerate it with `make contracts` (python -m contracts.asyncapi > docs/asyncapi.json)"
    )


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_reference_resolves() -> None:
    doc = _doc()
    for ref in _refs(doc):
        node: Any = doc
        for part in ref.removeprefix("#/").split("/"):
            assert isinstance(node, dict) and part in node, f"dangling $ref {ref}"
            node = node[part]


def test_every_command_event_and_task_message_is_on_a_channel() -> None:
    doc = _doc()
    on_channels = {m.rsplit("/", 1)[-1] for c in doc["channels"].values() for m in _refs(c.get("messages", {}))}
    assert set(VERB_OF) <= on_channels
    assert set(EVENT_TYPES) <= on_channels
    assert {"Task", "Accepted", "Rejected", "DryRun"} <= on_channels
    assert {o["action"] for o in doc["operations"].values()} == {"send", "receive"}


def _address_pattern(address: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[A-Za-z]+\\\}", r"[^.]+", re.escape(address)) + "$")


def test_every_subject_contracts_can_build_has_a_channel() -> None:
    addresses = [_address_pattern(c["address"]) for c in _doc()["channels"].values() if c.get("address")]
    built = [
        subjects.operation("t1", "alice", "expand"), subjects.job_events("t1", "j"), subjects.layout_events("t1", "j"),
        subjects.task_events("t1", "j", "n1.install.base", "p1"), subjects.cluster_events("t1", "c"), subjects.cluster_name_events("t1", "c1"),
        subjects.catalog_events("t1", "services", "base"), subjects.provisioner_events("t1", "p1"),
        subjects.task_queue("t1", "default"), subjects.job_query("t1", "alice", "j"), subjects.solve_request("t1", "planner"),
        subjects.identity_events("token", "0123456789ab"), subjects.auth_request("alice", "whoami"),
    ]
    for subject in built:
        assert any(p.match(subject) for p in addresses), f"no channel for {subject}"


def test_command_examples_are_valid_requests_on_their_verbs_channel() -> None:
    doc = _doc()
    for verb in set(VERB_OF.values()):
        channel = doc["channels"][f"operations.{verb}"]
        assert channel["address"] == f"muster.ops.{{tenant}}.{{principal}}.{verb}"
        (ref,) = _refs(channel["messages"])
        message = doc["components"]["messages"][ref.rsplit("/", 1)[-1]]
        example = message["examples"][0]["payload"]
        assert VERB_OF[COMMAND_ADAPTER.validate_python(example).type] == verb


def test_schemas_are_draft_07() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert '"prefixItems"' not in text and '"$defs"' not in text
    assert "\"discriminator\": {" not in text
