"""The pool service's use cases: decide on pools and record the decisions in the log.

Every change of a pool goes through `decide`: run a decision of the Pool aggregate, append its
events to the pool's subject with the expected last sequence, and only then answer anyone.
Another pool service that decided first makes the append fail; this one rebuilds the pool from
the log and decides again, so any number of pool services (and of planners asking them) never
hand out a host twice.

Requests come two ways: as facts in the log (the planner writes `PoolHostsRequested` and the
rest to its request subject; a durable consumer brings them here), or as request/reply commands
(`muster.pool.<principal>.<pool>.<verb>`) from administrators and other requesters, answered at once.
Deadlines are timers rebuilt from the pool on every start; callbacks still due are sent again.

Longer than most modules: every path into a pool (facts, commands, timers, callbacks) goes
through `decide`, and they read best next to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog
from nats.aio.client import Client
from pydantic import ValidationError

from contracts import subjects
from contracts.base import Event
from contracts.commands import Rejected
from contracts.errors import describe_validation_error
from contracts.limits import not_strict_json
from contracts.pool_commands import (
    POOL_COMMAND_ADAPTER,
    VERB_OF,
    AddHosts,
    CancelRequest,
    CheckCallback,
    CloseRequest,
    ConfigurePool,
    PoolAnswer,
    PoolCommand,
    RemoveHost,
    ReportNodes,
    RequestHosts,
    ResetHost,
    ResolveHost,
    ShowPool,
)
from contracts.pools import (
    Callback,
    PoolHostsRequested,
    PoolNodesReported,
    PoolRequestCancelled,
    PoolRequestClosed,
)
from muster.bus.repository import Repository, fence, fold, log_seq, mark_stored, pending_appends, rebuild
from muster.ports.eventlog import Append, ConcurrencyError, EventLog, Recorded

from .adapters.callbacks import CallbackSender, target_text
from .domain.intake import FACT_TYPES, take
from .domain.pool import Pool, PoolCreated, PoolError
from .domain.pool import hosts as count_hosts  # `hosts` names lists here
from .domain.views import pools_there

log = structlog.get_logger("muster.pool")
T = TypeVar("T")
MAX_CONFLICTS = 20


COMMAND_OF = {verb: kind for kind, verb in VERB_OF.items()}
"""The command a subject's verb names (`muster.pool.<principal>.<pool>.<verb>`)."""


class NoSuchPool(PoolError):
    """A command to a pool nobody made: answered `not_found`, so the CLI says it as a missing
    name, not as a refusal."""


def principal_of(command: PoolCommand, sender: str) -> str:
    """Who asks: the subject's principal (`muster.pool.<principal>.<pool>.<verb>`, which only
    that principal may use when the bus authorizes, docs/security.md); on an open bus, where
    every sender is anonymous, what the command names."""
    return sender if sender != subjects.ANONYMOUS else command.requested_by


def ending(pool: Pool, change: Callable[[], T]) -> tuple[T, list[str]]:
    """`change`'s result, and the waiting requests it ended (a host removed or dropped that
    they could not do without, terms that refuse them), each as the answer names it."""
    waiting = pool.requests.in_order()
    result = change()
    return result, [f"{r.request.request_id} (tenant {r.request.tenant}, {count_hosts(r.size)})" for r in waiting
                    if pool.requests.finished.get(r.request.request_id) == "cancelled"]


def ended_note(name: str, ended: list[str], by: str = "") -> str:
    """What a command that ended waiting requests says of them (`by`: its terms, else its hosts)."""
    these = "this waiting request" if len(ended) == 1 else "these waiting requests"
    why = f"its terms refuse {these}" if by else f"pool {name} can never serve {these}"
    return f"; {why} now, ended with the reason: {', '.join(ended)}" if ended else ""


@dataclass
class PoolService:
    nc: Client
    store: EventLog
    instance: str = "pool-1"
    sender: CallbackSender | None = None
    pools: dict[str, Pool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.repo = Repository(self.store)
        self.locks: dict[str, asyncio.Lock] = {}
        self.timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.sending: set[tuple[str, str, str]] = set()
        self.background: set[asyncio.Task[Any]] = set()
        self.sender = self.sender or CallbackSender(self.nc)
        self.decisions = 0
        self.stale: set[str] = set()
        """Pools whose copy may hold what a failed save never stored (the log unreadable after
        it): read again before anything decides on them (`_rebuild`)."""

    # -- the log -----------------------------------------------------------------------

    async def resume(self) -> None:
        """Rebuild every pool from the log, then set its deadline timers and send the
        callbacks it still owes."""

        def on_event(r: Recorded) -> None:
            name = r.subject.rsplit(".", 1)[1]
            self.pools[name] = fold(Pool, self.pools.get(name), r)

        await self.store.replay(subjects.ALL_POOL_EVENTS, on_event)
        for name, pool in self.pools.items():
            self._after(name, pool)
        log.info("resumed", pools=len(self.pools), hosts=sum(len(p.book.hosts) for p in self.pools.values()))

    async def catch_up(self, name: str) -> Pool | None:
        """Take in what other pool services recorded since this one last wrote or read (under
        the pool's lock: a decision in flight has events folded but not yet stored)."""
        async with self.locks.setdefault(name, asyncio.Lock()):
            return await self._catch_up(name)

    async def _catch_up(self, name: str) -> Pool | None:
        if name in self.stale:
            await self._rebuild(name)
        pool = self.pools.get(name)
        if pool is None:
            pool = rebuild(Pool, await self.store.read(subjects.pool_events(name)))
        else:
            for r in await self.store.read(subjects.pool_events(name), start_seq=log_seq(pool) + 1):
                pool = fold(Pool, pool, r)
        if pool is not None:
            self.pools[name] = pool
        return pool

    async def decide(self, name: str, change: Callable[[Pool], T], create_by: str | None = None,
                     atomic: bool = False) -> T:
        """Run `change` on the pool and record what it decided; a stale view is rebuilt from
        the log and the decision made again. `create_by`: make the pool if there is none.

        The events of one decision are appended as a chain, each fenced on the one before
        (`EventLog.append_chain`; an atomic batch costs much more than a single append on file
        storage with fsync: docs/pools.md): every pool event is a whole decision on its own, so if only the first
        lands (a crash, another writer), the pool is still right and the rest is decided
        again. Administrators' commands (`atomic=True`) land all or nothing: a host list
        half added would be refused as "already in pool" when sent again."""
        lock = self.locks.setdefault(name, asyncio.Lock())
        async with lock:
            for _ in range(MAX_CONFLICTS):
                if name in self.stale:
                    await self._rebuild(name)  # (raises while the log cannot be read: asked again later)
                pool = self.pools.get(name)
                if pool is None and create_by is None:
                    raise await self.no_pool(name)
                pool = pool if pool is not None else Pool(PoolCreated(pool=name, by=create_by or "anonymous"))
                result = change(pool)  # PoolError: nothing was recorded, nothing to undo
                try:
                    await self._save(pool, subjects.pool_events(name), atomic)
                except ConcurrencyError:
                    await self._rebuild(name)  # someone else decided first: decide again on their result
                    continue
                except BaseException:
                    self.stale.add(name)  # the events may or may not be in the log
                    with contextlib.suppress(Exception):  # (the save's own error is the one raised)
                        await self._rebuild(name)
                    raise
                self.pools[name] = pool
                self.decisions += 1
                self._after(name, pool)
                return result
        raise PoolError(f"pool {name}: {MAX_CONFLICTS} other writers got there first; try again")

    async def _save(self, pool: Pool, subject: str, atomic: bool) -> None:
        if atomic:
            await self.repo.save(pool, subject)
            return
        items = pending_appends(pool)
        if items:  # one round trip: each event lands only right after the one before
            [seqs] = await self.store.append_chain([(subject, items, fence(pool, subject, items))])
            mark_stored(pool, seqs[-1])

    async def _rebuild(self, name: str) -> None:
        pool = rebuild(Pool, await self.store.read(subjects.pool_events(name)))
        if pool is None:
            self.pools.pop(name, None)
        else:
            self.pools[name] = pool
        self.stale.discard(name)

    # -- requesters' facts, from the log ---------------------------------------------------

    async def on_request_event(self, r: Recorded) -> None:
        """A requester wrote to `muster.evt.<tenant>.poolreq.<pool>.<request-id>`. Facts of one
        request are taken in their order: a fact about a request this service does not know
        (another pool service took the request, or is taking it now) makes it read the
        request's whole short history and take all of it."""
        parts = r.subject.split(".")
        if len(parts) != 6 or r.type not in FACT_TYPES:
            return
        tenant, name, request_id = parts[2], parts[4], parts[5]
        pool = self.pools.get(name)
        if isinstance(r.event, (PoolHostsRequested, PoolNodesReported)) or (pool is not None and pool.requests.known(request_id)):
            # In order by itself: a request, a report (about nodes, whichever request), or a
            # fact about a request already taken.
            history = [r.event]
        else:  # a fact about a request this service has not seen: take the request's facts in order
            history = [h.event for h in await self.store.read(r.subject) if h.type in FACT_TYPES]
        creates = any(isinstance(f, PoolHostsRequested) for f in history)
        if name not in self.pools and not creates:
            log.warning("fact for an unknown pool ignored", pool=name, type=r.type)
            return
        # A request to an unknown pool makes it (empty), so the refusal can be recorded where
        # the requester looks for its answer.
        outcomes = await self.decide(name, lambda p: [take(p, tenant, request_id, f) for f in history],
                                     create_by=f"pool-service:{self.instance}" if creates else None)
        log.debug("request facts taken", pool=name, request=request_id, outcomes=outcomes)

    # -- commands, request/reply -------------------------------------------------------

    async def handle_command(self, name: str, verb: str, data: bytes, sender: str = subjects.ANONYMOUS) -> PoolAnswer | Rejected:
        if (not_json := not_strict_json(data)) is not None:
            return Rejected(reason=f"the body {not_json}")
        kind = COMMAND_OF.get(verb)
        if kind is None:  # (pydantic said "Unable to extract tag using discriminator 'type'")
            return Rejected(reason=f"no pool command {verb!r}: the verbs are {', '.join(sorted(COMMAND_OF))}")
        with contextlib.suppress(ValueError):  # (not JSON: the contract's parse below says where)
            body = json.loads(data)
            if isinstance(body, dict) and "type" not in body:  # the subject's verb names the command
                data = json.dumps({**body, "type": kind}).encode()
        try:
            subjects.token(name, "pool")
            command = POOL_COMMAND_ADAPTER.validate_json(data)
        except ValidationError as err:
            said = describe_validation_error(err)  # (the body itself: "is null: give an object" named nothing)
            if err.errors()[0]["loc"]:
                return Rejected(reason=said)
            # (pydantic's "Invalid JSON: key must be a string at ..." read "the body Invalid JSON: ...")
            return Rejected(reason=f"the body is not valid JSON: {said.removeprefix('Invalid JSON: ')}"
                            if said.startswith("Invalid JSON: ") else f"the body {said}")
        except ValueError as err:
            return Rejected(reason=str(err))
        if VERB_OF[command.type] != verb:
            return Rejected(reason=f"{command.type} goes to {subjects.POOL}.<principal>.<pool>.{VERB_OF[command.type]}, not .{verb}")
        try:
            return await self._command(name, command, principal_of(command, sender))
        except PoolError as err:
            return Rejected(reason=str(err), code="not_found" if isinstance(err, NoSuchPool) else None)

    async def _command(self, name: str, c: Any, by: str) -> PoolAnswer | Rejected:
        if isinstance(c, AddHosts):
            frozen = await self.decide(name, lambda p: p.add_hosts(list(c.hosts), by), create_by=by, atomic=True)
            message = f"{count_hosts(len(c.hosts))} registered in pool {name}"
            if frozen:
                message += f"; ambiguous, lent to nobody until resolved: {', '.join(frozen)}"
            return PoolAnswer(message=message, changed=[h.id for h in c.hosts])
        if isinstance(c, RemoveHost):
            _, ended = await self.decide(name, lambda p: ending(p, lambda: p.remove_host(c.host_id, by, c.reason)), atomic=True)
            return PoolAnswer(message=f"host {c.host_id} removed from pool {name}{ended_note(name, ended)}", changed=[c.host_id])
        if isinstance(c, ResetHost):
            await self.decide(name, lambda p: p.reset(c.host_id, by), atomic=True)
            return PoolAnswer(message=f"host {c.host_id} reset: back in pool {name}", changed=[c.host_id])
        if isinstance(c, ResolveHost):
            unfrozen, ended = await self.decide(name, lambda p: ending(p, lambda: p.resolve(c.host_id, by, c.use_claim, c.drop)),
                                                atomic=True)
            done = f"dropped {c.host_id}" if c.drop else f"kept registration {c.use_claim} of {c.host_id}"
            return PoolAnswer(message=f"{done}; no longer ambiguous: {', '.join(unfrozen) or 'none'}{ended_note(name, ended)}",
                              changed=unfrozen)
        if isinstance(c, ConfigurePool):
            # (only a pool made by this command has events not yet stored before it changes it)
            new, (_, ended) = await self.decide(name, lambda p: (bool(p.pending_events), ending(p, lambda: p.configure(c.terms, by))),
                                                create_by=by, atomic=True)
            if new:  # said so: `configure lba` (a typo) made a pool and read as if it had configured lab
                others = sorted(await self.pool_names() - {name})
                return PoolAnswer(message=f"pool {name} is new: made with policy {c.terms.policy}; it has no hosts yet "
                                          f"(`muster pool add-hosts {name} FILE`)"
                                          + (f"; the other pools: {', '.join(others)}" if others else ""))
            return PoolAnswer(message=f"pool {name} configured (policy {c.terms.policy}){ended_note(name, ended, 'its terms')}")
        if isinstance(c, CheckCallback):
            assert self.sender is not None
            problem, warning = await self.sender.check(c.callback, c.tenant)
            if problem:
                return Rejected(reason=problem, code="invalid", field="pool.callback")
            return PoolAnswer(state="allowed", message=warning)
        if isinstance(c, ShowPool):
            pool = await self.catch_up(name)
            if pool is None:
                raise await self.no_pool(name)
            # `seq`: the log sequence the view is at, so a reader can compare it with the log.
            return PoolAnswer(view={**self.view(pool, c.hosts), "seq": log_seq(pool)})
        return await self._as_requester(name, c, by)

    async def _as_requester(self, name: str, c: Any, by: str) -> PoolAnswer | Rejected:
        """A requester's command: recorded as its fact on the request subject (as the planner
        records its own), then taken in at once, so the answer can say where it stands."""
        fact: Event
        if isinstance(c, RequestHosts):
            req = c.request.model_copy(update={"by": by})
            if req.pool != name:
                raise PoolError(f"the request names pool {req.pool!r} but was sent to pool {name!r}")
            pool = await self.catch_up(name)
            if pool is None:
                raise await self.no_pool(name)
            known = pool.requests.known(req.request_id)
            reason = "" if known else pool.refusal(req)
            if not reason and not known and req.callback is not None:
                assert self.sender is not None
                why = (await self.sender.check(req.callback, req.tenant))[0]
                reason = f"callback: {why}" if why else ""
            if reason:
                return Rejected(reason=reason)  # refused at admission: nothing is recorded
            tenant, rid, fact = req.tenant, req.request_id, PoolHostsRequested(request=req)
        elif isinstance(c, CancelRequest):
            tenant, rid, fact = c.tenant, c.request_id, PoolRequestCancelled(request_id=c.request_id, reason=c.reason, by=by)
        elif isinstance(c, ReportNodes):
            tenant, rid = c.tenant, c.request_id
            fact = PoolNodesReported(request_id=rid, cluster_id=c.cluster_id, status=c.status, node_ids=list(c.node_ids),
                                     reason=c.reason, by=by)
        else:
            assert isinstance(c, CloseRequest)
            tenant, rid, fact = c.tenant, c.request_id, PoolRequestClosed(request_id=c.request_id, outcome=c.outcome, by=by)
        if name not in self.pools and not isinstance(c, RequestHosts):
            raise await self.no_pool(name)
        subject = subjects.pool_request_events(tenant, name, rid)
        digest = hashlib.sha256(fact.model_dump_json().encode()).hexdigest()[:16]
        await self.store.append(subject, [Append(event=fact, msg_id=f"poolreq:{subject}:{digest}")])
        outcome = await self.decide(name, lambda p: take(p, tenant, rid, fact))
        pool = self.pools[name]
        if isinstance(c, RequestHosts):
            return self.request_answer(pool, rid, outcome)
        return PoolAnswer(message=outcome, state=outcome)

    def request_answer(self, pool: Pool, request_id: str, outcome: str) -> PoolAnswer:
        r = pool.requests.open.get(request_id)
        if r is None:
            how = pool.requests.finished.get(request_id, outcome)
            return PoolAnswer(state=how, message=f"request {request_id} is {how}")
        if r.state == "waiting":
            position = pool.position(request_id)
            return PoolAnswer(state="waiting", position=position,
                              message=f"waiting for {count_hosts(r.size)} of pool {pool.name}: {position} in line")
        hosts = [{"node_id": a.node_id, **pool.book.hosts[a.host_id].view()} for a in r.assignments
                 if a.host_id in pool.book.hosts]
        return PoolAnswer(state="granted", hosts=hosts, message=f"granted {count_hosts(len(r.assignments))} of pool {pool.name}")

    @staticmethod
    def view(pool: Pool, hosts: bool = True) -> dict[str, Any]:
        out = {**pool.summary(), "queue": pool.queue_view()}
        if hosts:
            out["hosts_detail"] = pool.hosts_view()
        return out

    async def pool_names(self) -> set[str]:
        """Every pool in the log (another pool service may have made some)."""
        return set(self.pools) | {s.rsplit(".", 1)[1] for s in await self.store.subject_names(subjects.ALL_POOL_EVENTS)}

    async def no_pool(self, name: str) -> NoSuchPool:
        """The refusal of a pool nobody made, with the pools there are: a walk of session 27 read
        `refused: there is no pool 'lab'` (like a permission problem) and had to guess the names."""
        return NoSuchPool(f"no pool {name!r}: {pools_there(list(await self.pool_names()))}")

    async def list_pools(self) -> list[dict[str, Any]]:
        """Every pool in the log (another pool service may have made some)."""
        names = await self.pool_names()
        for name in names:
            await self.catch_up(name)
        return [self.pools[n].summary() for n in sorted(names) if n in self.pools]

    # -- timers and callbacks ----------------------------------------------------------

    def _after(self, name: str, pool: Pool) -> None:
        """After every decision: one timer per waiting request with a deadline; a send for
        every callback due."""
        loop = asyncio.get_running_loop()
        deadlines = pool.deadlines()
        for timer in [k for k in self.timers if k[0] == name and k[1] not in deadlines]:
            self.timers.pop(timer).cancel()
        now = datetime.now(UTC)
        for rid, deadline in deadlines.items():
            if (name, rid) not in self.timers:
                delay = max(0.0, (deadline - now).total_seconds())
                self.timers[(name, rid)] = loop.call_later(delay, self._on_deadline, name, rid)
        for (rid, on), due in pool.callbacks_due.items():
            key = (name, rid, on)
            if key not in self.sending:
                self.sending.add(key)
                self._spawn(self._send(key, due["target"], due["body"], due["tenant"]))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def _on_deadline(self, name: str, request_id: str) -> None:
        self.timers.pop((name, request_id), None)
        self._spawn(self._expire(name, request_id))

    async def _expire(self, name: str, request_id: str) -> None:
        try:
            if await self.decide(name, lambda p: p.expire(request_id, datetime.now(UTC))):
                log.info("request expired", pool=name, request=request_id)
        except Exception:
            log.exception("expiry failed", pool=name, request=request_id)

    async def _send(self, key: tuple[str, str, str], target: Callback, body: dict[str, Any], tenant: str) -> None:
        name, rid, on = key
        try:
            assert self.sender is not None
            attempts, error = await self.sender.send(target, body, tenant)
            await self.decide(name, lambda p: p.delivered(rid, on, target_text(target), attempts, error))
            log.info("callback sent" if not error else "callback gave up", pool=name, request=rid, on=on, error=error)
        except Exception:
            log.exception("callback failed", pool=name, request=rid, on=on)
        finally:
            self.sending.discard(key)

    async def close(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
        for task in list(self.background):
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        if self.sender is not None:
            await self.sender.close()
