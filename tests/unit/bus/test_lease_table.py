"""`muster planners` reads the leases bucket through `lease_table`: a bucket that is not there,
or holds no keys, is nobody holding anything; a server that does not answer is an error, not an
empty table (it read "no live planners", and `--json` 0 shards, on a loaded CI machine)."""

from __future__ import annotations

from typing import Any

import pytest
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import BucketNotFoundError, NoKeysError

from muster.bus.shards import lease_table


class _Js:
    def __init__(self, raised: Exception) -> None:
        self.raised = raised

    async def key_value(self, bucket: str) -> Any:
        raise self.raised


class _Kv:
    async def keys(self) -> list[str]:
        raise NoKeysError()


class _Empty:
    async def key_value(self, bucket: str) -> Any:
        return _Kv()


async def test_no_bucket_or_no_keys_is_an_empty_table_and_a_timeout_is_raised() -> None:
    assert await lease_table(_Js(BucketNotFoundError())) == ({}, {})  # type: ignore[arg-type]
    assert await lease_table(_Empty()) == ({}, {})  # type: ignore[arg-type]
    with pytest.raises(NatsTimeout):
        await lease_table(_Js(NatsTimeout()))  # type: ignore[arg-type]
