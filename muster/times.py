"""Times as people read them (pure): one format for the CLI, the console's own (`2026-11-30
12:00:05 UTC`), and one wording for a lease that never ends.

The CLI showed microseconds in one command, milliseconds in another, `...Z` in a third and no
zone in a fourth; the CLI said "never (no lease)", the console "forever", the planner "lease is
forever". `--json` output keeps ISO 8601."""

from __future__ import annotations

from datetime import UTC, datetime

NO_LEASE_END = "never (no lease)"
"""A cluster without a lease end, wherever one is shown: CLI, console, timeline, refusals."""


def shown_time(value: datetime | str | None, missing: str = "-") -> str:
    """Seconds, in UTC, with the zone; an ISO string is read first (a naive one is UTC, as the log
    writes them); what is not a time is shown as given."""
    if value is None or value == "":
        return missing
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    else:
        moment = value
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + " UTC"


def lease_end(expires_at: datetime | str | None) -> str:
    """When the lease ends, or that it never does."""
    return shown_time(expires_at) if expires_at else NO_LEASE_END
