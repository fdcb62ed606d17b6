"""A hosts file for `muster pool add-hosts` read as a person writes it (docs/pools.md, "Hosts").
Walk of session 27: the doc's example with its key left out, or emptied, was answered in
pydantic's words ("Field required", "List should have at least 1 item after validation, not
0"), which told a newcomer neither what a host key is nor where to get one."""

from __future__ import annotations

import pytest

from muster.cli_support import CliError
from services.pool.cli import host_entries

HOST = {"id": "node1.lab.example", "address": "10.0.0.11", "cpu": 16, "memory": "64G", "labels": ["ssd"]}


@pytest.mark.parametrize("keys", [None, []])
def test_a_host_without_a_key_is_told_where_to_get_one(keys: list[str] | None) -> None:
    host = dict(HOST) if keys is None else {**HOST, "host_keys": keys}
    with pytest.raises(CliError) as raised:
        host_entries([host], "hosts.yaml")
    said = str(raised.value)
    assert said.startswith("hosts.yaml: host 1 (node1.lab.example): host_keys: none given: "), said
    assert "ssh-keyscan ADDRESS" in said and "Field required" not in said and "at least 1 item" not in said


def test_a_host_with_a_key_is_read_with_its_properties() -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    [spec] = host_entries([{**HOST, "host_key": key}], "hosts.yaml")
    assert spec.host_keys == [key] and spec.properties.cpu == 16 and spec.properties.labels == ["ssd"]
