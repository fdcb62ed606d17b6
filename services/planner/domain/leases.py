"""Cluster leases (pure): Coopr's `administration.leaseduration {initial, max, step}` of a
template (coopr-facts §1.6), 0 = forever.

A cluster created from a template with a lease expires `initial` after it was accepted (or
sooner, if the request asks for less); the expiry is a logged fact (`ClusterLeaseChanged`),
and its timer is rebuilt from the log (`services/planner/leases.py`). An extension may move the
expiry forward by at most `step` (0: any) from the later of now and the current expiry, and
never past `max` after the cluster was created (0: no bound).

Durations are what Coopr's `LeaseDuration` reads: a number of milliseconds (Coopr's older
JSON, e.g. `"initial": 0`), `"0"`/`"min"` (0), `"max"` (no bound), or `<n>s|m|h|d`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from muster.durations import spoken
from muster.times import NO_LEASE_END, shown_time

from .admission import Refused

_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(\d+)([smhd])$")


def duration_s(value: Any, what: str = "duration") -> float:
    """Seconds of a Coopr lease duration; 0 means forever. Raises ValueError naming `what`."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} is not a duration")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{what}: {value!r} is negative")
        return value / 1000.0  # Coopr's JSON counted milliseconds
    if isinstance(value, str):
        text = value.strip()
        if text in ("0", "min", "max"):
            return 0.0  # "max" is Long.MAX_VALUE in Coopr: as good as forever
        if text.isdigit():
            return int(text) / 1000.0
        match = _DURATION.match(text)
        if match:
            return float(int(match.group(1)) * _UNIT[match.group(2)])
    raise ValueError(f"{what}: {value!r} is not a duration (milliseconds, or <n>s, <n>m, <n>h, <n>d; 0 = forever)")


@dataclass(frozen=True)
class Terms:
    initial_s: float = 0.0
    max_s: float = 0.0
    step_s: float = 0.0

    @property
    def forever(self) -> bool:
        return self.initial_s == 0


def terms_of(administration: dict[str, Any]) -> Terms:
    """A template's lease terms; no `leaseduration` is a lease forever. Raises ValueError."""
    lease = administration.get("leaseduration")
    if lease is None:
        return Terms()
    if not isinstance(lease, dict):
        raise ValueError("administration.leaseduration must be an object {initial, max, step}")
    return Terms(*(duration_s(lease.get(k, 0), f"administration.leaseduration.{k}") for k in ("initial", "max", "step")))


@dataclass(frozen=True)
class Lease:
    expires_at: datetime | None
    """None: forever."""
    max_at: datetime | None
    step_s: float


def initial(terms: Terms, requested_s: float | None, now: datetime) -> Lease:
    """The lease of a new cluster. `requested_s` (the request's `lease_s`) may shorten the
    template's initial lease, never lengthen it (Coopr's `calcInitialLease`); 0 asks for
    forever, which only a template without a lease allows."""
    seconds = terms.initial_s
    if requested_s is not None:
        if requested_s < 0:
            raise Refused(f"lease_s {requested_s:g} is negative", code="invalid", field="lease_s")
        if terms.initial_s and (requested_s == 0 or requested_s > terms.initial_s):
            raise Refused(f"the template's initial lease is {spoken(terms.initial_s)}, which a create may shorten, not lengthen; "
                          f"{spoken(requested_s) if requested_s else '0'} requested"
                          f"{', which expires ' + NO_LEASE_END if requested_s == 0 else ''}", code="invalid", field="lease_s")
        seconds = requested_s
    max_at = now + timedelta(seconds=terms.max_s) if terms.max_s else None
    expires = now + timedelta(seconds=seconds) if seconds else None
    if expires is not None and max_at is not None and expires > max_at:
        expires = max_at
    return Lease(expires, max_at, terms.step_s)


def extended(current: Lease, now: datetime, *, by_s: float | None = None, until: datetime | None = None) -> datetime:
    """The new expiry an extension asks for, or `Refused` saying which limit it breaks."""
    if current.expires_at is None:
        raise Refused(f"the cluster expires {NO_LEASE_END}: nothing to extend", code="conflict")
    base = max(now, current.expires_at)
    if until is None:
        step = by_s if by_s is not None else current.step_s
        if not step:
            raise Refused("say how long to extend the lease by (by_s) or until when (until): the template sets no step",
                          code="invalid", field="by_s")
        until = base + timedelta(seconds=step)
    if until <= current.expires_at:
        raise Refused(f"the lease already runs until {shown_time(current.expires_at)}; {shown_time(until)} is not later",
                      code="invalid", field="until")
    if current.step_s and until > base + timedelta(seconds=current.step_s):
        raise Refused(f"an extension may add at most {spoken(current.step_s)} (the template's step) to "
                      f"{shown_time(base)}; {shown_time(until)} asked", code="invalid", field="by_s" if by_s is not None else "until")
    if current.max_at is not None and until > current.max_at:
        raise Refused(f"the lease may not run past {shown_time(current.max_at)} (the template's max); "
                      f"{shown_time(until)} asked", code="invalid", field="by_s" if by_s is not None else "until")
    return until
