"""A service using muster from Python: create a cluster, grow it, delete it.

Run it against `muster up` (in another terminal; the demo catalog is loaded by `muster demo`,
or load it with `muster catalog apply muster/demo/catalog`). Like every muster command it finds
the deployment in ./.muster or in $MUSTER_DATA_DIR (what `muster up` tells other shells to
export), or at $NATS_URL:

    python examples/cluster_lifecycle.py --nodes 3

Every request carries an idempotency key: run this twice with the same `--request-id` and the
second run joins the first one's jobs instead of creating a second cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from nats.errors import NoServersError

from contracts.commands import Accepted, DryRun, ExpandCluster, Rejected
from contracts.events import FINAL_JOB_EVENTS
from muster.bus.connect import CredentialsError, default_data_dir, nats_url
from muster.client import MusterClient, MusterError


async def main(args: argparse.Namespace) -> int:
    async with await MusterClient.connect(args.nats_url, connect_attempts=3, tenant=args.tenant) as client:
        # 1. What would be built? A dry run answers with the layout and plan, and records nothing.
        preview = await client.create_cluster(args.name, template=args.template, nodes=args.nodes, dry_run=True)
        if isinstance(preview, DryRun) and preview.layout is not None:
            for group in preview.layout.layout:
                print(f"would build {group.count} x {group.hardwaretype}/{group.imagetype}: {', '.join(group.services)}")

        # 2. Create it; the answer comes at once, the outcome through the job's events.
        reply = await client.create_cluster(args.name, template=args.template, nodes=args.nodes,
                                            request_id=f"{args.request_id}-create" if args.request_id else None)
        if isinstance(reply, Rejected):
            print(f"create rejected: {reply.reason}", file=sys.stderr)
            return 2
        assert isinstance(reply, Accepted)
        print(f"create accepted: job {reply.job_id}{' (joined an earlier request)' if reply.duplicate else ''}")
        done = 0
        async for recorded in client.events(reply.job_id):
            if recorded.type == "JobPlanned":
                print(f"  planned {len(recorded.event.tasks)} tasks")
            elif recorded.type == "TaskCompleted":
                done += 1
            elif recorded.type in FINAL_JOB_EVENTS:
                print(f"  {ending(recorded.type, recorded.event, done)}")
                if recorded.type != "JobSucceeded":
                    return 1

        # 3. Grow it by one node and wait for the end in one call (raises if rejected).
        outcome = await client.run(ExpandCluster(cluster_id=reply.cluster_id, nodes=args.nodes + 1,
                                                 request_id=f"{args.request_id}-expand" if args.request_id else None))
        print(f"expand: {outcome.final.type}")
        cluster = await client.cluster(reply.cluster_id)
        print(f"cluster {cluster.name}: {cluster.status}, {len(cluster.nodes)} nodes, services {', '.join(cluster.services)}")

        # 4. Delete it.
        if not args.keep:
            deleted = await client.delete_cluster(reply.cluster_id)
            if not isinstance(deleted, Accepted):
                print(f"delete not accepted: {deleted}", file=sys.stderr)
                return 2
            final = await client.wait(deleted.job_id, timeout=args.timeout)
            print(f"delete: {final.type}")
            return 0 if final.type == "JobSucceeded" else 1
        return 0 if outcome.succeeded else 1


def ending(kind: str, event: object, done: int) -> str:
    """A job's last line: a job that did not succeed says why (`JobRolledBack after 8 tasks` said
    nothing more; every such event carries its `reason`)."""
    reason = getattr(event, "reason", "")
    return f"{kind} after {done} tasks" + (f": {reason}" if kind != "JobSucceeded" and reason else "")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nats-url", default=None,
                        help="default: $NATS_URL, else the one `muster up` saved ($MUSTER_DATA_DIR or ./.muster), else nats://127.0.0.1:4222")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--name", default="example")
    parser.add_argument("--template", default="hadoop-small")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--request-id", default=None, help="idempotency key prefix (reuse it to retry safely)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--keep", action="store_true", help="do not delete the cluster")
    options = parser.parse_args()
    try:
        sys.exit(asyncio.run(main(options)))
    except (MusterError, CredentialsError) as err:
        print(err, file=sys.stderr)
        sys.exit(2)
    except (NoServersError, OSError):
        print(f"cannot reach NATS at {nats_url(options.nats_url, default_data_dir())}: is `muster up` running? (give --nats-url, "
              "$NATS_URL or $MUSTER_DATA_DIR)", file=sys.stderr)
        sys.exit(3)
