"""The scale bench's reader of nats-server's Go CPU profile (`bench.server_profile`): pprof's
protobuf decoded by hand, summed by stack, by function and by part."""

from __future__ import annotations

import gzip

from bench.server_profile import part_of, parts, stacks, summary


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _packed(values: list[int]) -> bytes:
    return b"".join(_varint(v) for v in values)


def _profile() -> bytes:
    """Two functions, one location each; samples (leaf first) of 10 ms and 20 ms, and 5 ms more
    of the first stack: its samples add up."""
    names = ["", "samples", "count", "cpu", "nanoseconds", "main.loop", "server.newAtomicBatch"]
    body = b"".join(_field(6, n.encode()) for n in names)
    body += _field(5, _field(1, 1) + _field(2, 5)) + _field(5, _field(1, 2) + _field(2, 6))
    body += _field(4, _field(1, 1) + _field(4, _field(1, 1))) + _field(4, _field(1, 2) + _field(4, _field(1, 2)))
    body += _field(2, _field(1, _packed([2, 1])) + _field(2, _packed([1, 10_000_000])))
    body += _field(2, _field(1, _packed([1])) + _field(2, _packed([2, 20_000_000])))
    body += _field(2, _field(1, _packed([2, 1])) + _field(2, _packed([1, 5_000_000])))
    return gzip.compress(body)


def test_samples_sum_by_stack_leaf_first() -> None:
    got = stacks(_profile())
    assert got == {("server.newAtomicBatch", "main.loop"): 15_000_000, ("main.loop",): 20_000_000}


def test_summary_gives_each_function_its_own_and_cumulative_time() -> None:
    total, rows = summary(stacks(_profile()))
    assert total == 35.0
    assert rows == [("main.loop", 20.0, 35.0), ("server.newAtomicBatch", 15.0, 15.0)]


def test_a_stack_counts_in_the_first_part_it_names() -> None:
    assert part_of(("server.newAtomicBatch", "server.(*stream).processJetStreamAtomicBatchMsg")) == "atomic batch: staging store made"
    assert part_of(("main.loop",)) == "other"
    assert parts(stacks(_profile())) == {"atomic batch: staging store made": 15.0, "other": 20.0}
