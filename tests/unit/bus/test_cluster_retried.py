"""The cluster tests' bounded retry of a first write (tests/integration/bus/clusters.py): a KV put
refused 503 by a node of a fresh cluster whose route to the stream's node is still forming
(nats-py's `NoStreamResponseError`) is sent again; anything else is not."""

from __future__ import annotations

import pytest
from nats.js.errors import NoStreamResponseError

from tests.integration.bus.clusters import retried


async def test_a_put_no_stream_answered_is_sent_again() -> None:
    answers: list[Exception | int] = [NoStreamResponseError(), NoStreamResponseError(), 7]

    async def put() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await retried(put) == 7 and answers == []


async def test_other_errors_and_the_last_try_are_raised() -> None:
    calls = 0

    async def put() -> int:
        nonlocal calls
        calls += 1
        raise ValueError("not a refusal")

    with pytest.raises(ValueError):
        await retried(put)
    assert calls == 1

    async def refused() -> int:
        raise NoStreamResponseError()

    with pytest.raises(NoStreamResponseError):
        await retried(refused, tries=2)
