"""Latency and failure injection shared by the simulated provider and automator.

Latency specs (milliseconds):
  "250"                      always 250 ms
  "150-600"                  uniform between 150 and 600 ms
  "lognormal:200:0.8"        long-tailed: median 200 ms, sigma 0.8 (of the log)
  "lognormal:200:0.8:5000"   the same, capped at 5000 ms

Each task attempt gets its own random stream. With a `seed` that stream is derived from the
seed, the task id, the attempt and the action only, so a given attempt always takes the same
time and succeeds or fails the same way, whatever ran before it and in whichever process.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contracts.tasks import TaskMessage


@dataclass(frozen=True)
class Latency:
    kind: str  # "fixed" | "uniform" | "lognormal"
    a: float
    b: float = 0.0
    cap: float = math.inf

    @classmethod
    def parse(cls, spec: str) -> Latency:
        text = str(spec).strip().lower()
        try:
            if text.startswith("lognormal:"):
                parts = [float(p) for p in text.split(":")[1:]]
                if len(parts) not in (2, 3) or parts[0] <= 0 or parts[1] < 0:
                    raise ValueError
                return cls("lognormal", parts[0], parts[1], parts[2] if len(parts) == 3 else math.inf)
            if "-" in text:
                low, high = (float(p) for p in text.split("-", 1))
                if not 0 <= low <= high:
                    raise ValueError
                return cls("uniform", low, high)
            value = float(text or "0")
            if value < 0:
                raise ValueError
            return cls("fixed", value)
        except ValueError:
            raise ValueError(
                f"bad latency {spec!r}: use '250', '150-600' or 'lognormal:MEDIAN:SIGMA[:MAX]' (ms)"
            ) from None

    def sample_ms(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return min(self.cap, rng.lognormvariate(math.log(self.a), self.b))


@dataclass(frozen=True)
class Behaviour:
    """What one simulated action will do: how long it takes and whether it fails."""

    latency_ms: float
    fails: bool
    failure_rate: float
    rng: random.Random
    permanent: bool = False
    """A failure drawn is one no retry can mend (the planner does not retry it): to show a
    "failed, not retried" job in tests and demos."""

    first_failing: int = 0
    """Attempts up to this number fail whatever the rate (`fail_first_attempts`)."""
    attempt: int = 1

    def failure(self, action: str) -> str:
        kind = "permanent failure (not retried)" if self.permanent else "failure"
        if self.attempt <= self.first_failing:  # not the rate, which may well be 0
            return f"simulated {kind} of {action} (attempt {self.attempt}: fail_first_attempts is {self.first_failing})"
        return f"simulated {kind} of {action} (failure rate {self.failure_rate:g})"


def _lookup(fields: Mapping[str, Any], fallback: Mapping[str, Any], key: str) -> Any:
    for source in (fields, fallback):
        value = source.get(key)
        if value is not None and value != "":
            return value
    return None


_UNSEEDED = random.Random()
"""For attempts without a seed: one stream for all (a new `Random()` seeds itself from the OS,
a cost per task for numbers nobody needs to repeat)."""


def task_rng(task: TaskMessage, seed: Any, kind: str) -> random.Random:
    if seed is None or seed == "":
        return _UNSEEDED
    material = f"{seed}|{task.cluster_id}|{task.task_id}|{task.attempt}|{task.action.value}|{kind}"
    return random.Random(int.from_bytes(hashlib.sha256(material.encode()).digest()[:8], "big"))


def _flag(fields: Mapping[str, Any], fallback: Mapping[str, Any], key: str, action: str) -> bool:
    raw = _lookup(fields, fallback, f"{key}_{action}")
    raw = _lookup(fields, fallback, key) if raw is None else raw
    if raw is None or isinstance(raw, bool):
        return bool(raw)
    text = str(raw).strip().lower()
    if text in ("true", "yes", "1", "on", "false", "no", "0", "off"):
        return text in ("true", "yes", "1", "on")
    raise ValueError(f"bad {key} {raw!r}: use true or false")


def behaviour(
    task: TaskMessage, fields: Mapping[str, Any], kind: str, fallback: Mapping[str, Any] | None = None
) -> Behaviour:
    """Read latency_ms[_<action>], failure_rate[_<action>], fail_first_attempts[_<action>],
    failure_permanent[_<action>] and seed."""
    fallback = fallback or {}
    action = task.action.value
    latency = Latency.parse(
        str(_lookup(fields, fallback, f"latency_ms_{action}") or _lookup(fields, fallback, "latency_ms") or "0")
    )
    raw_rate = _lookup(fields, fallback, f"failure_rate_{action}")
    if raw_rate is None:
        raw_rate = _lookup(fields, fallback, "failure_rate")
    try:
        rate = float(raw_rate) if raw_rate is not None else 0.0
    except (TypeError, ValueError):
        raise ValueError(f"bad failure rate {raw_rate!r}: use a number between 0 and 1") from None
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"bad failure rate {raw_rate!r}: use a number between 0 and 1")
    raw_first = _lookup(fields, fallback, f"fail_first_attempts_{action}")
    if raw_first is None:
        raw_first = _lookup(fields, fallback, "fail_first_attempts")
    try:
        first = int(raw_first) if raw_first is not None else 0
    except (TypeError, ValueError):
        raise ValueError(f"bad fail_first_attempts {raw_first!r}: use an integer") from None
    rng = task_rng(task, _lookup(fields, fallback, "seed"), kind)
    latency_ms = latency.sample_ms(rng)
    roll = rng.random()
    return Behaviour(latency_ms=latency_ms, fails=task.attempt <= first or roll < rate, failure_rate=rate, rng=rng,
                     permanent=_flag(fields, fallback, "failure_permanent", action), first_failing=first,
                     attempt=task.attempt)


async def simulate_latency(b: Behaviour) -> None:
    if b.latency_ms > 0:
        await asyncio.sleep(b.latency_ms / 1000)


def fake_ipv4(providerid: str) -> str:
    digest = hashlib.sha256(providerid.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{max(1, digest[2]) if digest[2] < 255 else 254}"
