"""The presence bucket made by its first reader (a planner's or tracker's watch started before any
provisioner) has the deployment's replicas, as a provisioner makes it: made with one replica on a
3-node cluster, it lived on one node, whose loss left every provisioner unable to renew its
presence, so each stopped its work (decision 54's lease) until the node came back (found by
tests/fault/test_sharded_planners.py's NATS node kill, session 25)."""

from __future__ import annotations

from typing import Any

import pytest
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError

from services.provisioner.presence import watched_bucket


class NoBucketYet:
    def __init__(self) -> None:
        self.made: list[KeyValueConfig] = []

    async def key_value(self, bucket: str) -> Any:
        raise BucketNotFoundError

    async def create_key_value(self, config: KeyValueConfig) -> Any:
        self.made.append(config)
        return object()


@pytest.mark.parametrize("replicas", ["1", "3"])
async def test_a_reader_that_makes_the_bucket_gives_it_the_deployments_replicas(replicas: str,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_REPLICAS", replicas)
    js = NoBucketYet()
    await watched_bucket(js)  # type: ignore[arg-type]
    assert [c.replicas for c in js.made] == [int(replicas)]
