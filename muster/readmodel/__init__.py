"""The read model: what the log says about jobs and clusters, folded without the planner.

Shared by the tracker (HTTP, SSE, the operator commands), the Python client and the `muster`
commands. Pure: no NATS, no asyncio, no planner aggregates; it reads contract events wrapped
in `contracts.records.Recorded` and nothing else, so any of its readers can run it.

- `jobs`: a job's view (the document its owning planner answers with), from its events;
- `progress`: that view event by event, with task locations and the stages being run;
- `status`: a job's status as the tracker answers it (view + where each task runs + layout);
- `locations`: where each job, task and cluster is, and the supersede rule that merges it;
- `clusters`: a cluster from its events (now, or at a point of the log);
- `observed`: its drift, and what a repair does about it given the tenant's catalog (what each
  service needs: `muster.catalog.needs`, the planner's rule);
- `timeline`: a readable line per event, with who did it and how long it took.

The one set of final job states and events is `contracts.events.FINAL_JOB_STATES` /
`FINAL_JOB_EVENTS`.
"""
