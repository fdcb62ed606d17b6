"""How the `muster` commands read: through the tracker's HTTP API, with the token in use, for
every principal (docs/decisions/0016-people-through-the-tracker.md).

The tracker scopes every answer by the principal's tenant and grants; this module turns its answers
into the commands' errors and exit codes (a refusal is exit 4 and says what is missing, never
"unreachable").

    async with TrackerReads(bus) as tracker:
        cluster = await tracker.cluster("web")                      # by id or name
        async for r in tracker.events(job=job_id, follow=True):     # a job's story, live
            ...
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from contracts import subjects
from contracts.events import EVENT_ADAPTER
from contracts.identity import Permission
from contracts.records import Recorded

from . import cli_bus
from .bus.connect import CredentialsError, bearer_headers, credentials, missing_data_dir
from .cli_support import EXIT_DENIED, EXIT_FAILED, EXIT_INVALID, EXIT_UNREACHABLE, CliError, credentials_failed, new_token
from .readmodel.clusters import ClusterInfo
from .readmodel.observed import Drift, needs_catalog
from .tls.context import http_connector, http_refusal

if TYPE_CHECKING:  # imported when a read begins: `muster cluster create` without --wait reads nothing
    import aiohttp

TENANT_HEADER = "X-Muster-Tenant"
LAST_SEQ = 1 << 62
"""`after` this, a read returns no event, only `end`: where the log stands now."""
SILENT_S = 45.0
"""A stream that says nothing for this long (the tracker sends a keep-alive every 15 s) is
taken for lost, and opened again from the last event it gave."""
CONNECT_S = 5.0
ANSWER_S = 10.0
"""How long a request waits for the answer's first line (its status and headers): a tracker that
accepted the connection and says nothing is exit 3 after this, not after SILENT_S (a wait of 46 s,
session 33). Only the start of an answer: a stream then waits on its events as long as they take.
Above the few seconds a tracker takes to answer 503 when it cannot reach the log."""
STREAM_ANSWER_S = 30.0
"""The same for a stream of the log's events (`events`: history, `cluster list`, `--wait`): the
tracker reads the history it sends before its first line, and a whole tenant's, or a
10,000-node cluster's (over 100,000 events, read at some 27,000 a second), takes seconds."""
RECONNECTS = 3


class SilentTracker(TimeoutError):
    """The tracker accepted the connection and sent no answer within `args[0]` seconds."""


def recorded(item: dict[str, Any]) -> Recorded:
    """An event as `GET /v1/events` sends it, back as the log's Recorded (for the read model)."""
    return Recorded(seq=int(item["seq"]), subject=item["subject"], time=datetime.fromisoformat(item["time"]),
                    event=EVENT_ADAPTER.validate_python(item["event"]), aggregate_id=item.get("aggregate_id"),
                    version=item.get("version"))


class TrackerReads:
    """One command's reads from the tracker (`bus.tracker_url`), as the token's principal, in
    the tenant the command names (else the principal's own)."""

    def __init__(self, bus: Any, tenant: str | None = None) -> None:
        self.url = bus.tracker_url()
        self._ssl = bus.http_ssl()  # the deployment's CA, when the tracker speaks HTTPS (docs/security.md, "TLS")
        self._data_dir: Path | None = bus.data_dir
        self.tenant: str | None = tenant or bus.asked
        try:
            self._headers = bearer_headers()
            found = credentials()
            self._source, self._principal = found.source, found.principal
        except CredentialsError as err:
            raise credentials_failed(err) from None
        if self.tenant is not None:
            # Said here as a request on the bus says it: the tracker's words named its header
            # (`X-Muster-Tenant 'a.b' is not a tenant name`), which no command has.
            subjects.token(self.tenant, "tenant")
            self._headers[TENANT_HEADER] = self.tenant
        self._http: aiohttp.ClientSession | None = None
        self.log_end = 0
        """Where the log stood when the last finished read began (its `end`)."""

    @property
    def principal(self) -> str | None:
        """Who the token in use is (for a message's next step), None without one."""
        return None if self._source == "none" else self._principal

    async def __aenter__(self) -> TrackerReads:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_S, sock_read=SILENT_S)
        self._http = aiohttp.ClientSession(timeout=timeout, headers=self._headers,
                                           connector=http_connector(ssl=self._ssl))
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._http is not None:
            await self._http.close()

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None, "use `async with TrackerReads(...)`"
        return self._http

    # -- answers -----------------------------------------------------------------------------------

    async def get(self, path: str, **params: Any) -> Any:
        """A JSON answer, or CliError with the tracker's reason and the matching exit code."""
        import aiohttp

        try:
            async with await self._answer(path, params) as resp:
                await self._check(resp)
                return await resp.json()
        except (aiohttp.ClientError, SilentTracker) as err:
            raise self._unreachable(err) from None

    async def _answer(self, path: str, params: dict[str, Any], within: float | None = None) -> aiohttp.ClientResponse:
        """GET `path`: the answer once its status and headers came, else SilentTracker after
        `within` seconds (ANSWER_S)."""
        import aiohttp

        limit = ANSWER_S if within is None else within
        try:
            async with asyncio.timeout(limit):
                return await self.http.get(self.url + path, params=_query(params))
        except aiohttp.ClientError:  # its own timeouts too (a connect that took too long): not a silent tracker
            raise
        except TimeoutError:
            raise SilentTracker(limit) from None

    async def pages(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """Every item of a paged route."""
        items: list[dict[str, Any]] = []
        after = 0
        while True:
            page = await self.get(path, **params, limit=500, after=after)
            items += page["items"]
            if page.get("next_after") is None:
                return items
            after = page["next_after"]

    async def _check(self, resp: aiohttp.ClientResponse) -> None:
        import aiohttp

        if resp.status < 400:
            return
        try:
            message = str((await resp.json())["error"]["message"])
        except (ValueError, KeyError, TypeError, aiohttp.ClientError):
            message = f"HTTP {resp.status}"
        if resp.status == 401 and self._source == "none":
            # (from a folder without `.muster`: it said "the token from none" and sent the user to
            # an admin for a new token, where the one `muster up` made was a `cd` away)
            raise CliError(cli_bus.without_token("tracker"), EXIT_DENIED)
        if resp.status == 401:
            # and the way on, as `whoami` says it (the commands said only that it was refused)
            raise CliError(f"the tracker refused the token from {self._source}: {message}\n{new_token(self._principal, message)}", EXIT_DENIED)
        if resp.status == 403:
            raise CliError(f"refused: {message}", EXIT_DENIED)
        if resp.status in (400, 404):
            raise CliError(message, EXIT_INVALID)
        if resp.status == 503:
            raise CliError(f"the tracker at {self.url} cannot read the log now: {message}", EXIT_UNREACHABLE)
        raise CliError(f"the tracker at {self.url} failed: {message}", EXIT_FAILED)

    def _unreachable(self, err: BaseException) -> CliError:
        if isinstance(err, SilentTracker):
            return CliError(f"the tracker at {self.url} accepted the connection but did not answer within {err.args[0]:g} s: "
                            "is it overloaded or stopped (a paused process, a debugger), or is something other than "
                            "the tracker listening there?", EXIT_UNREACHABLE)
        refused = http_refusal(err, self.url, self._data_dir)
        if refused is not None:
            return CliError(refused, EXIT_UNREACHABLE)
        # A TLS server drops a plain request without a word: say what that may mean.
        plain = (" (a tracker serving HTTPS needs an https:// URL)"
                 if self.url.startswith("http://") and type(err).__name__ == "ServerDisconnectedError" else "")
        from muster.runtime.ps import unanswered

        up = unanswered(self._data_dir, "tracker", self.url)
        if up is not None:
            return CliError(f"cannot reach the tracker at {self.url} ({type(err).__name__}): {up}", EXIT_UNREACHABLE)
        return CliError(f"cannot reach the tracker at {self.url} ({type(err).__name__}){plain}: is `muster up` running, or "
                        f"--tracker-url / $MUSTER_TRACKER_URL set?"
                        f"{missing_data_dir(self.url, cli_bus.DEFAULT_TRACKER_URL, self._data_dir)}", EXIT_UNREACHABLE)

    # -- the log -------------------------------------------------------------------------------------

    async def events(self, *, follow: bool = False, after: int = 0, **selection: Any) -> AsyncIterator[dict[str, Any]]:
        """Events of `GET /v1/events` (one of subject=, job=, cluster=; jobs=, since=) in log
        order, as the tracker sends them. Without `follow` it ends where the log stood when the
        read began; with it, a job's story ends with the job, anything else goes on. A stream
        cut short is opened again from its last event."""
        import aiohttp

        lost, opened = 0, False
        while True:
            params = {**selection, "after": after, "follow": follow}
            try:
                async with await self._answer("/v1/events", params, STREAM_ANSWER_S) as resp:
                    await self._check(resp)
                    opened = True
                    async for kind, data in _server_sent(resp.content):
                        if kind == "end":
                            self.log_end = int(data["seq"])
                            return
                        if kind == "error":  # the tracker ended it: the token revoked, a grant taken back
                            raise CliError(str(data.get("message", "the tracker ended the stream")), EXIT_DENIED)
                        lost = 0
                        if kind == "skipped":  # a message that is not an event: said, and read past
                            after = int(data["seq"])
                            print(f"warning: skipped #{data['seq']} on {data['subject']}: not a valid event "
                                  f"({data.get('reason', '')})", file=sys.stderr)
                            continue
                        after = int(data["seq"])
                        yield data
            except (aiohttp.ClientError, TimeoutError) as err:
                lost += 1
                if lost > RECONNECTS or not opened:
                    raise self._unreachable(err) from None
                await asyncio.sleep(0.5 * lost)  # a tracker restarting: try again shortly, a few times
                continue
            lost += 1  # the stream ended without `end`: cut short
            if lost > RECONNECTS:
                raise CliError(f"the tracker at {self.url} keeps ending the stream early", EXIT_UNREACHABLE)

    async def position(self, job_id: str) -> int:
        """Where the log stands now, for a job that exists and may be read (else CliError):
        follow from here to see only what the job does next."""
        async for _ in self.events(job=job_id, after=LAST_SEQ):
            pass
        return self.log_end

    async def history(self, **selection: Any) -> list[Recorded]:
        return [recorded(item) async for item in self.events(**selection)]

    async def cluster(self, ref: str, needs: Permission = "read") -> ClusterInfo:
        """A cluster by id or name (the live one of that name, else the last deleted), folded
        from its own events. `needs`: what it is read for (an operation's permission), which
        the tracker checks and names in a refusal."""
        found = ClusterInfo.from_history(await self.history(cluster=ref, jobs=False, needs=None if needs == "read" else needs))
        if found is None:
            raise CliError(f"no cluster {ref!r}", EXIT_INVALID)
        return await self._repairs(found)

    async def clusters(self) -> list[ClusterInfo]:
        """Every cluster of the tenant, folded from their own events."""
        by_subject: dict[str, list[Recorded]] = defaultdict(list)
        for r in await self.history(cluster="*", jobs=False):
            by_subject[r.subject].append(r)
        out = [await self._repairs(c) for c in map(ClusterInfo.from_history, by_subject.values()) if c is not None]
        return sorted(out, key=lambda c: (c.name, c.updated))

    async def _repairs(self, found: ClusterInfo) -> ClusterInfo:
        """What a repair does about a failed service depends on the catalog (a replica whose
        primary is down is only started), which a reader may not be allowed to read: the
        tracker's view of the cluster says it, and is asked only then."""
        if not needs_catalog(found.drift):
            return found
        view = await self.get(f"/v1/clusters/{found.id}")
        said = {(d.node, d.service, d.observed): d.after for d in map(Drift.from_json, view.get("drift") or ())}
        # The fold's pairs (the view may be a moment newer), each with what the tracker said.
        return found.with_drift(replace(d, after=said.get((d.node, d.service, d.observed), d.after)) for d in found.drift)


def _query(params: dict[str, Any]) -> dict[str, str]:
    return {k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in params.items() if v is not None}


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The body's lines, however long (an event with a big layout is one line of megabytes)."""
    pending = b""
    async for chunk in content.iter_any():
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line


async def _server_sent(content: aiohttp.StreamReader) -> AsyncIterator[tuple[str, Any]]:
    """(event, data) of a text/event-stream body; comments (keep-alives) are skipped."""
    kind, data = "message", list[str]()
    async for raw in _lines(content):
        line = raw.decode().rstrip("\r")
        if not line:
            if data:
                yield kind, json.loads("\n".join(data))
            kind, data = "message", list[str]()
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
