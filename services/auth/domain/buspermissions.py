"""What a principal may publish and subscribe to on the bus: the allow lists the auth callout
puts in each connection's user JWT (docs/security.md has the same table in prose).

Everything not allowed is denied by the server. A tenant's people get their own request
subjects and inbox only: no JetStream API, no KV, no event or task subject. Services get what
their code uses; a provisioner only the queues of its grants and only subjects naming itself.

A new stream, bucket or subject a service uses needs its line here: the end-to-end and fault
suites run every service with its own identity, and a missing line shows as a "Permissions
Violation" in nats-server's log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contracts import subjects
from contracts.pool_commands import ANY_POOL

from .state import Grant, Principal

JS = "$JS.API"
KV_STREAMS = ("KV_locations", "KV_presence", "KV_nodemaps", "KV_leases", "KV_snapshots")
"""The buckets operators read (history, replay, drains, `muster planners`)."""
BODIES = ("BODIES", "muster.body")
"""Large event bodies (muster/bus/bodies.py): stream, subject prefix `.<tenant>.<digest>...`"""


ANSWERS = "_INBOX.>"
"""Where a service answers the requests it takes: an inbox (muster/bus/answers.py), any
principal's, since a request's sender names the inbox and may be a service forwarding another's
request (docs/security.md). Services get this instead of the server's `allow_responses`, which
lets a connection publish on whatever reply subject a request names: a tenant's raw client
that named another tenant's log as its request's reply had every service write there, and
since then only each service's own check stood in the way; now the server refuses such an
answer too."""


@dataclass(frozen=True)
class BusPermissions:
    pub: tuple[str, ...]
    sub: tuple[str, ...]
    responses: bool = False
    """may answer the requests it receives on their reply subjects, whatever they are (the
    server's `allow_responses`): the system identity only, which may publish anywhere anyway"""

    @property
    def everything(self) -> bool:
        return self.pub == (">",) and self.sub == (">",)


def _requests(principal: str, tenant: str) -> list[str]:
    return [f"{subjects.OPS}.{tenant}.{principal}.*", f"{subjects.QUERY}.{tenant}.{principal}.>",
            f"{subjects.AUTH}.{principal}.*", f"{subjects.GOV}.{tenant}.{principal}.*"]


def _pool_commands(principal: str) -> list[str]:
    """Commands to the pool services in the sender's own name (docs/pools.md)."""
    return [f"{subjects.POOL}.{principal}.*.*", subjects.pool_list(principal)]


CALLBACKS = "muster.cb"
"""Pool callbacks on the bus: `muster.cb.<tenant>.…` (the pool refuses a request naming another
tenant's, contracts/pools.py)."""


LOG_STREAMS = (subjects.EVENTS_STREAM, BODIES[0])
"""What every service's start declares (`muster.bus.streams.ensure_streams`); the planner's and
the provisioners' TASKS too (`muster.runtime.service.TASK_QUEUE_SERVICES`)."""


def _streams_declared(created: Iterable[str], bound: Iterable[str] = (), *, no_info: Iterable[str] = ()) -> list[str]:
    """A service's streams: those its start declares, created by name (one already there is
    left as it is), and the info of those and of `bound` (streams it reads but never declares);
    no update, delete or purge of any: the auth service (system) updates them at its start, so
    an upgrade's new config lands once whatever order the services start in. With every
    service's right to create any stream and update any stream's config, a compromised one
    could drop the log with a lower limit, change its subjects, or capture `muster.ops.>` (or
    have EVENTS republished to its inbox) in a stream of its own
    (tests/integration/auth/test_service_streams.py). `no_info`: streams whose info it may not
    ask (EVENTS' with a subject filter in the body names every subject of the log); the list of
    streams (`STREAM.LIST`, no subject of any in its answer) tells it their configs."""
    created = tuple(dict.fromkeys(created))
    return [f"{JS}.INFO", f"{JS}.STREAM.NAMES", f"{JS}.STREAM.LIST"] + [
        f"{JS}.STREAM.CREATE.{s}" for s in created] + [
        f"{JS}.STREAM.INFO.{s}" for s in dict.fromkeys((*created, *bound)) if s not in set(no_info)]


def _provisioner_streams() -> list[str]:
    """What a provisioner's start declares (the log's streams and its presence bucket: already
    there, so nothing changes) and the streams it binds to, by name. Not every stream's rights:
    a stream of its own sourcing EVENTS, or EVENTS updated with a `republish`, had the server copy
    every tenant's events to its inbox, a lower limit dropped them, and EVENTS' info with a subject
    filter named every subject of the log (tests/integration/auth/test_provisioner_streams.py)."""
    created = (subjects.EVENTS_STREAM, subjects.TASKS_STREAM, BODIES[0], f"KV_{subjects.PRESENCE_BUCKET}")
    bound = (subjects.TASKS_STREAM, f"KV_{subjects.PRESENCE_BUCKET}", "KV_nodemaps")
    # (`$JS.API.INFO`, the account's totals: nats-py asks it before creating a bucket)
    return [f"{JS}.INFO"] + [f"{JS}.STREAM.CREATE.{s}" for s in created] + [f"{JS}.STREAM.INFO.{s}" for s in bound]


def _read_stream(stream: str) -> list[str]:
    """Direct gets, message gets and consumers (durable, ephemeral, ordered) of one stream."""
    return [f"{JS}.DIRECT.GET.{stream}", f"{JS}.DIRECT.GET.{stream}.>", f"{JS}.STREAM.MSG.GET.{stream}",
            f"{JS}.CONSUMER.CREATE.{stream}", f"{JS}.CONSUMER.CREATE.{stream}.>", f"{JS}.CONSUMER.DURABLE.CREATE.{stream}.*",
            f"{JS}.CONSUMER.INFO.{stream}.*", f"{JS}.CONSUMER.DELETE.{stream}.*", f"{JS}.CONSUMER.MSG.NEXT.{stream}.*",
            f"{JS}.CONSUMER.NAMES.{stream}", f"{JS}.CONSUMER.LIST.{stream}",
            f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>"]


def _read_events(filters: Iterable[str], *, deletes: bool, gets: Iterable[str] | None = None) -> list[str]:
    """The log, read by a service whose consumers there take only `filters`: each made by name
    with its one filter in the request's subject (`CONSUMER.CREATE.EVENTS.<name>.<filter>`:
    nats-server refuses a body whose filter is not the subject's), any name. No unnamed creation
    (`CONSUMER.CREATE.EVENTS`, the filter in the body where permissions cannot see it) nor the
    legacy durable one: with either, a compromised pool service read every tenant's events
    (tests/integration/auth/test_service_consumers.py). `deletes`: it deletes the ordered
    readers it is done with (`muster.bus.ordered`), under names it picked, so any name.

    `gets`: the subjects whose last event it reads by the direct get naming the subject in the
    API subject (`DIRECT.GET.EVENTS.<subject>`, `muster.bus.scopedlog`), and no other get. None:
    the batch direct get and the message get too, whose filter is in the body where permissions
    cannot see it (`next_by_subj: muster.evt.acme.>` read every tenant's events: decision 0057),
    for the services not moved to scoped reads yet."""
    stream = subjects.EVENTS_STREAM
    if gets is None:
        reads = [f"{JS}.DIRECT.GET.{stream}", f"{JS}.DIRECT.GET.{stream}.>", f"{JS}.STREAM.MSG.GET.{stream}"]
    else:
        reads = [f"{JS}.DIRECT.GET.{stream}.{g}" for g in gets]
    return reads + [
        f"{JS}.CONSUMER.CREATE.{stream}.*.{f}" for f in filters] + [
        f"{JS}.CONSUMER.INFO.{stream}.*", f"{JS}.CONSUMER.NAMES.{stream}", f"{JS}.CONSUMER.LIST.{stream}",
        f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>"] + ([f"{JS}.CONSUMER.DELETE.{stream}.*"] if deletes else [])


def _consumer(stream: str, name: str, subject_filter: str) -> list[str]:
    """One durable of its own name and filter: created on the subject naming both (nats-server
    refuses a body whose filter is not the subject's), not with the filter in the body, where a
    provisioner made its queue's durable take every tenant's tasks (`muster.task.>`, on a TASKS a
    restart had emptied of the other queues' consumers: tests/integration/auth/test_provisioner_streams.py)."""
    return [f"{JS}.CONSUMER.CREATE.{stream}.{name}.{subject_filter}", f"{JS}.CONSUMER.INFO.{stream}.{name}",
            f"{JS}.CONSUMER.MSG.NEXT.{stream}.{name}", f"$JS.ACK.{stream}.{name}.>"]


def _read_log(*buckets: str) -> list[str]:
    """The log (and its large bodies), and the KV buckets named (their streams), to read."""
    return [p for s in (subjects.EVENTS_STREAM, BODIES[0], *buckets) for p in _read_stream(s)]


def _read_bodies(filters: Iterable[str]) -> list[str]:
    """The bodies of the events of `filters` (`muster.body.<filter>.<hex>.<part>`), each part by
    the direct get naming its subject: no other read of BODIES (the message get, the batch direct
    get and a consumer created with its filter in the body read any tenant's bodies), nor its
    info (with a subject filter it names every body's subject, and so every offloaded event's)."""
    return [f"{JS}.DIRECT.GET.{BODIES[0]}.{subjects.body_filter(f)}" for f in filters]


def _log_reader(filters: Iterable[str], *, deletes: bool = False, scoped: bool = False) -> list[str]:
    """A service whose only streams are the log's (the pool service, governance, the notifier, the
    solver): it declares the two at start and reads EVENTS (its consumers `filters` only) and
    BODIES, no bucket. `scoped`: it reads EVENTS in scoped forms only (`muster.bus.scopedlog`):
    the last event of a subject of `filters` by the subject's direct get, no other get, and
    not EVENTS' info; and BODIES only the bodies of those events (decision 0057)."""
    filters = tuple(filters)
    if not scoped:
        return _streams_declared(LOG_STREAMS) + _read_events(filters, deletes=deletes) + _read_stream(BODIES[0])
    return (_streams_declared(LOG_STREAMS, no_info=LOG_STREAMS)
            + _read_events(filters, deletes=deletes, gets=filters) + _read_bodies(filters))


CONSUMED: dict[str, tuple[str, ...]] = {
    # its requesters' pool requests (its routes), the pools (its mirror and its start's replay)
    "pool": (subjects.ALL_POOL_REQUEST_EVENTS, subjects.ALL_POOL_EVENTS),
    # the schedules (its mirror), the identities (`IdentityView`: who may do what), its entities,
    # the clusters a schedule names and each subscription's last notification (`notify list`'s
    # delivery column) (its scoped reads: decision 0057)
    "governance": (subjects.ALL_SCHEDULE_EVENTS, subjects.ALL_IDENTITY_EVENTS, subjects.ALL_GOVERNANCE_EVENTS,
                   subjects.ALL_CLUSTER_EVENTS, subjects.ALL_NOTIFICATION_EVENTS),
    # every tenant's jobs' ends and clusters' leases (its routes; a job's events and a cluster's,
    # its scoped reads), the subscriptions (its mirror, one just made), the identities (whether a
    # subscription's author may still read its tenant), the catalogs (a repair's drift) and its
    # own notifications (its start's replay)
    "notifier": (subjects.ALL_JOB_EVENTS, subjects.ALL_CLUSTER_EVENTS, subjects.ALL_SUBSCRIPTION_EVENTS,
                 subjects.ALL_IDENTITY_EVENTS, subjects.ALL_CATALOG_EVENTS, subjects.ALL_NOTIFICATION_EVENTS),
    "solver": (subjects.ALL_LAYOUT_EVENTS,),  # layouts to solve (its route)
}
"""The filters of each service's consumers on EVENTS (its routes' filters, its mirrors', its
replays', and of a service reading in scoped forms its aggregates'): all it may create a
consumer of (and, each of these services reading in scoped forms only, direct get a subject's
last event of). tests/unit/auth/test_consumed.py checks the routes against it; the planner and
the tracker read every event for their work."""

PLANNER_BUCKETS = tuple(f"KV_{b}" for b in ("nodemaps", "leases", "snapshots", "budgets", "spend"))
"""The buckets a planner declares at start (and reads and writes)."""


def bus_permissions(principal: Principal, grants: Iterable[Grant] = ()) -> BusPermissions:
    pid = principal.id
    inbox = f"{subjects.inbox_prefix(pid)}.>"
    evt = subjects.EVT
    if principal.disabled:
        return BusPermissions((), ())
    if principal.role in ("user", "tenant_admin"):
        assert principal.tenant is not None
        # A cluster (or pool request) of theirs with a bus callback is told on their tenant's.
        return BusPermissions(tuple(_requests(pid, principal.tenant)), (inbox, f"{CALLBACKS}.{principal.tenant}.>"))
    if principal.role == "super_admin":
        # Operators: requests in every tenant under their own name, drains, reading the log and
        # the buckets (history, replay, events), and catalog changes (`muster catalog apply`
        # appends them itself, with its principal as `by`). Nothing else of the log or queues.
        # `muster pool ...` (docs/pools.md): pool commands are administrators' only, in their own name.
        pub = _requests(pid, "*") + _pool_commands(pid) + [
                                     f"{evt}.*.catalog.>", f"{subjects.QUERY}.provisioner.*.drain", subjects.PLANNER_METRICS, f"{JS}.INFO",
                                     f"{JS}.STREAM.NAMES", f"{JS}.STREAM.LIST", f"{JS}.STREAM.INFO.*"] + _read_log(*KV_STREAMS)
        # They may watch the log's events as they happen (what they may read anyway).
        return BusPermissions(tuple(pub), (inbox, f"{evt}.>"))
    kind = principal.service
    if kind == "system":
        return BusPermissions((">",), (">",), responses=True)
    if kind == "planner":
        # Its streams: the log's, and the buckets it keeps (it reads KV_presence, the live
        # provisioners, and declares it when no provisioner has yet). It publishes tasks and
        # asks TASKS' info (a restarted server's new queue), and reads no task: no consumer there.
        presence = f"KV_{subjects.PRESENCE_BUCKET}"
        pub = _streams_declared((*LOG_STREAMS, subjects.TASKS_STREAM, *PLANNER_BUCKETS, presence)) + _read_log(*PLANNER_BUCKETS, presence) + [
            f"{evt}.*.job.*", subjects.ALL_JOB_TASK_RECORDS, subjects.ALL_CLAIMS_CLOSED, subjects.ALL_STEPS_CLOSED, f"{evt}.*.cluster.*", f"{evt}.*.layout.*", f"{evt}.*.plan.*", f"{evt}.*.clustername.*",
            f"{evt}.*.denied.*",  # requests the tenant's policies refused (docs/governance.md)
            f"{evt}.*.catalog.>",  # catalog changes it checked against the requester's grants (catalog-apply|delete)
            subjects.ALL_POOL_REQUEST_EVENTS, f"{subjects.TASK}.>",
            f"{subjects.QUERY}.*.{pid}.solve", f"{subjects.AUTH}.{pid}.*", f"{BODIES[1]}.>",
            "$KV.nodemaps.>", "$KV.leases.>", "$KV.snapshots.>",
            "$KV.budgets.>", *_read_stream("KV_budgets"),  # the concurrency limits shared by the planners
            "$KV.spend.>", *_read_stream("KV_spend"),  # the tenants' spend by shard, for the policies (decision 44)
            f"{subjects.SHARD}.>",  # requests forwarded to the holder of a cluster's shard
            subjects.ALL_PROVISIONER_HELD,  # what each provisioner holds, after the task queue was lost
            # May the pool service POST to a create's callback URL? (decision 38; no other pool command)
            f"{subjects.POOL}.{pid}.{ANY_POOL}.check-callback",
            ANSWERS,
        ]
        # (a segment's steps' outcomes, asked by the provisioner it came to again: decision 58)
        sub = [f"{subjects.OPS}.*.*.*", subjects.ALL_JOB_QUERIES, subjects.ALL_STEP_OUTCOMES, subjects.PLANNER_METRICS,
               f"{subjects.SHARD}.>", inbox]
        return BusPermissions(tuple(pub), tuple(sub))
    if kind == "pool":
        # The pool service (docs/pools.md): it alone writes the pools; it records the facts of
        # requesters that ask over the bus, answers commands, and sends callbacks to the
        # requesting tenant's own `muster.cb.<tenant>.` subjects (checked when the request comes).
        # It reads the log in scoped forms (services/pool/entrypoint.py: decision 0057): its
        # requests' and pools' events, nothing else, by consumers and subject direct gets.
        pub = _log_reader(CONSUMED["pool"], deletes=True, scoped=True) + [  # (its ordered readers)
            subjects.ALL_POOL_EVENTS, subjects.ALL_POOL_REQUEST_EVENTS, f"{CALLBACKS}.*.>", f"{subjects.AUTH}.{pid}.*",
            f"{BODIES[1]}.>", ANSWERS,
        ]
        # Its requesters' facts come on a subject of its own, not its inbox: the durable is shared
        # by the pool services of every identity (services/pool/routing.py).
        return BusPermissions(tuple(pub), (subjects.ALL_POOL_COMMANDS, subjects.ALL_POOL_LISTS, subjects.POOL_REQUESTS_DELIVERY, inbox))
    if kind == "governance":
        # Governance entities in its requesters' names (checked against their grants), and each
        # schedule's tick sent as the schedule's owner: like the tracker, it sends requests
        # naming someone else, and the planner checks that principal's grants again. It asks the
        # notifier to check a subscription before storing it, in the requester's name too.
        pub = _log_reader(CONSUMED["governance"], scoped=True) + [  # (services/governance/entrypoint.py)
            subjects.ALL_GOVERNANCE_EVENTS, f"{subjects.OPS}.*.*.*", f"{subjects.AUTH}.{pid}.*", f"{BODIES[1]}.>",
            f"{subjects.GOV}.*.*.notify-check", ANSWERS,
        ]
        return BusPermissions(tuple(pub), (subjects.ALL_GOVERNANCE_REQUESTS, inbox))
    if kind == "notifier":
        # Notifications and their attempts, and the bus subjects subscriptions name (a tenant's
        # own `muster.cb.<tenant>.`, checked when the subscription is made). It reads the log in
        # scoped forms (services/notifier/entrypoint.py, decision 0057), and deletes no consumer.
        pub = _log_reader(CONSUMED["notifier"], scoped=True) + [subjects.ALL_NOTIFICATION_EVENTS, f"{CALLBACKS}.*.>", f"{subjects.AUTH}.{pid}.*",
                                      f"{BODIES[1]}.>", ANSWERS]
        # It answers `muster notify test` (`muster.gov.<tenant>.<principal>.notify-test`) and the
        # governance service's check of a subscription before it is stored (`notify-check`).
        return BusPermissions(tuple(pub), (f"{subjects.GOV}.*.*.notify-test", f"{subjects.GOV}.*.*.notify-check", inbox))
    if kind == "solver":
        # Scoped reads (services/solver/entrypoint.py, decision 0057): a layout's last event, when
        # its fenced answer is refused (was it a retry that landed?).
        pub = _log_reader(CONSUMED["solver"], scoped=True) + [f"{evt}.*.layout.*", f"{subjects.AUTH}.{pid}.*", f"{BODIES[1]}.>", ANSWERS]
        return BusPermissions(tuple(pub), (subjects.ALL_SOLVE_REQUESTS, inbox))
    if kind == "tracker":
        # Queries in its own name only. It sends people's operations on connections opened with
        # their own tokens (services/tracker/acting.py, decision 17): it may send none itself.
        # Its streams: the log's, and the locations and snapshots buckets (its index, replay's
        # stories), which it reads. The live provisioners (`live_provisioners`: the console, `/v1/
        # provisioners`, a job's status) in one direct get of every presence key's last record:
        # no consumer, message get or info there. No node map, lease, budget or spend.
        own = (f"KV_{subjects.LOCATIONS_BUCKET}", "KV_snapshots")
        pub = _streams_declared((*LOG_STREAMS, *own)) + _read_log(*own) + [
            f"{JS}.DIRECT.GET.KV_{subjects.PRESENCE_BUCKET}",
            f"{subjects.QUERY}.*.{pid}.>", f"$KV.{subjects.LOCATIONS_BUCKET}.>",
            subjects.PLANNER_METRICS, f"{subjects.AUTH}.{pid}.*",
            "$KV.snapshots.*.story.*",  # replay's story snapshots (services/tracker/story.py)
        ]
        return BusPermissions(tuple(pub), (inbox,))  # it takes requests from nobody: it answers none
    if kind == "provisioner":
        pub = _provisioner_streams() + [f"$KV.{subjects.PRESENCE_BUCKET}.provisioner.{pid}", f"{JS}.DIRECT.GET.KV_presence",
                        f"{JS}.DIRECT.GET.KV_presence.>", f"{subjects.AUTH}.{pid}.*",
                        # tasks' node maps (stored by the planner; a get by key is a message get)
                        f"{JS}.STREAM.MSG.GET.KV_nodemaps", ANSWERS]  # (what it holds, to a planner; a drain)
        for tenant, klass in provisioner_queues(grants):
            writes = [f"{evt}.{tenant}.task.*.*.{pid}", f"{evt}.{tenant}.task.*.*.{pid}.{subjects.PROGRESS}",
                   f"{evt}.{tenant}.provisioner.{pid}",
                   # (the marker a claim goes with, one token under the attempt's StepClosed: decision 59)
                   f"{evt}.{tenant}.job.*.{subjects.STEPS}.*.*.{pid}"]
            # (a large result's body: whether it is stored already, by the direct get of its last part)
            # A segment that came again asks the planner acting for its job what the log holds of
            # its steps, in its own name (docs/decisions/0058, item 5): no read of any other
            # provisioner's task events (tests/integration/auth/test_provisioner_task_reads.py).
            pub += writes + _read_bodies(writes) + [f"{BODIES[1]}.{tenant}.>", f"{JS}.DIRECT.GET.KV_nodemaps.$KV.nodemaps.{tenant}.>",
                                                    subjects.step_outcomes(tenant, pid)]
            pub += _consumer(subjects.TASKS_STREAM, subjects.task_consumer(tenant, klass), subjects.task_queue(tenant, klass))
        return BusPermissions(tuple(dict.fromkeys(pub)), (subjects.provisioner_drain(pid), subjects.provisioner_held(pid), inbox))
    return BusPermissions((), ())


def provisioner_queues(grants: Iterable[Grant]) -> list[tuple[str, str]]:
    """(tenant, class) of every queue a provisioner is granted (`execute` on `queue:<class>`)."""
    return sorted({(g.scope.tenant, g.scope.id) for g in grants
                   if g.scope.kind == "queue" and g.permission == "execute" and g.scope.id != "*"})
