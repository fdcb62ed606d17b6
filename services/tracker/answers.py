"""Answers of `GET /v1/jobs/{id}` kept to be served again (`Tracker.job_status_json`): at most
`MOST` of them and `MOST_BYTES` in all, the one used least recently dropped first. Bytes bound
it, not only the count: a 10,000-node job's answer is megabytes of JSON (docs/benchmarks.md).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

MOST = 4096
MOST_BYTES = 32 * 2**20


@dataclass(frozen=True, slots=True)
class Answer:
    at: float
    """When it was computed (`time.monotonic()`)."""
    version: int
    """The job's version in the index then."""
    final: bool
    body: bytes


class Answers:
    def __init__(self, most: int = MOST, most_bytes: int = MOST_BYTES) -> None:
        self.most, self.most_bytes = most, most_bytes
        self.bytes = 0
        self._kept: OrderedDict[tuple[str, str], Answer] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: tuple[str, str]) -> Answer | None:
        answer = self._kept.get(key)
        if answer is not None:
            self._kept.move_to_end(key)
        return answer

    def forget(self, key: tuple[str, str]) -> None:
        old = self._kept.pop(key, None)
        if old is not None:
            self.bytes -= len(old.body)

    def put(self, key: tuple[str, str], answer: Answer) -> None:
        """Keep it (replacing the job's older one); one larger than the whole budget is not kept."""
        old = self._kept.pop(key, None)
        if old is not None:
            self.bytes -= len(old.body)
        if len(answer.body) > self.most_bytes:
            return
        self._kept[key] = answer
        self.bytes += len(answer.body)
        while len(self._kept) > self.most or self.bytes > self.most_bytes:
            self.bytes -= len(self._kept.popitem(last=False)[1].body)
