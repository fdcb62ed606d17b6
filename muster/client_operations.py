"""One method per operation, for `MusterClient` (docs/client.md): each builds its command,
stamped with an idempotency key and who asks, and sends it with the client's `request` (which
retries with the same key). Kept apart from the client's machinery: these are thin and many.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from contracts.commands import (
    Accepted,
    AddServices,
    ApplyPlan,
    CancelJob,
    Command,
    ConfigureCluster,
    CreateCluster,
    DeleteCluster,
    DryRun,
    ExpandCluster,
    ExtendLease,
    LeaseExtended,
    PauseJob,
    Rejected,
    RemoveServices,
    RestartServices,
    ResumeJob,
    RetryJob,
    RollbackCluster,
    ShrinkCluster,
    StartServices,
    StopServices,
    UpgradeService,
)

Reply = Accepted | Rejected | DryRun | LeaseExtended


def new_request_id() -> str:
    return uuid.uuid4().hex


class Operations:
    """The operation methods; `MusterClient` supplies `request` and `requested_by`."""

    requested_by: str

    async def request(self, command: Command, *, tenant: str | None = None, timeout: float | None = None,
                      attempts: int | None = None) -> Reply:
        raise NotImplementedError

    def _common(self, request_id: str | None, requested_by: str | None) -> dict[str, Any]:
        return {"request_id": request_id or new_request_id(), "requested_by": requested_by or self.requested_by}

    async def create_cluster(
        self, name: str, *, template: str, nodes: int, services: Sequence[str] | None = None, provider: str | None = None,
        hardwaretype: str | None = None, imagetype: str | None = None, config: dict[str, Any] | None = None,
        dry_run: bool = False, tenant: str | None = None, request_id: str | None = None, requested_by: str | None = None,
    ) -> Reply:
        return await self.request(CreateCluster(
            name=name, template=template, nodes=nodes, services=list(services) if services is not None else None,
            provider=provider, hardwaretype=hardwaretype, imagetype=imagetype, config=config or {}, dry_run=dry_run,
            **self._common(request_id, requested_by)), tenant=tenant)

    async def delete_cluster(self, cluster_id: str, *, dry_run: bool = False, tenant: str | None = None,
                             request_id: str | None = None, requested_by: str | None = None) -> Reply:
        return await self.request(DeleteCluster(cluster_id=cluster_id, dry_run=dry_run, **self._common(request_id, requested_by)), tenant=tenant)

    async def expand_cluster(self, cluster_id: str, nodes: int, *, dry_run: bool = False, tenant: str | None = None,
                             request_id: str | None = None, requested_by: str | None = None) -> Reply:
        """Grow to `nodes` nodes in total."""
        return await self.request(ExpandCluster(cluster_id=cluster_id, nodes=nodes, dry_run=dry_run,
                                                **self._common(request_id, requested_by)), tenant=tenant)

    async def shrink_cluster(self, cluster_id: str, nodes: int, *, dry_run: bool = False, tenant: str | None = None,
                             request_id: str | None = None, requested_by: str | None = None) -> Reply:
        """Shrink to `nodes` nodes in total."""
        return await self.request(ShrinkCluster(cluster_id=cluster_id, nodes=nodes, dry_run=dry_run,
                                                **self._common(request_id, requested_by)), tenant=tenant)

    async def add_services(self, cluster_id: str, services: Iterable[str], *, dry_run: bool = False, tenant: str | None = None,
                           request_id: str | None = None, requested_by: str | None = None) -> Reply:
        return await self.request(AddServices(cluster_id=cluster_id, services=list(services), dry_run=dry_run,
                                              **self._common(request_id, requested_by)), tenant=tenant)

    async def remove_services(self, cluster_id: str, services: Iterable[str], *, dry_run: bool = False, tenant: str | None = None,
                              request_id: str | None = None, requested_by: str | None = None) -> Reply:
        return await self.request(RemoveServices(cluster_id=cluster_id, services=list(services), dry_run=dry_run,
                                                 **self._common(request_id, requested_by)), tenant=tenant)

    async def configure_cluster(self, cluster_id: str, config: dict[str, Any], *, restart: bool = False, dry_run: bool = False,
                                tenant: str | None = None, request_id: str | None = None, requested_by: str | None = None,
                                nodes: Iterable[str] | None = None) -> Reply:
        return await self.request(ConfigureCluster(cluster_id=cluster_id, config=config, restart=restart, dry_run=dry_run,
                                                   nodes=_opt_list(nodes),
                                                   **self._common(request_id, requested_by)), tenant=tenant)

    async def start_services(self, cluster_id: str, services: Iterable[str] | None = None, *, dry_run: bool = False,
                             tenant: str | None = None, request_id: str | None = None, requested_by: str | None = None,
                             nodes: Iterable[str] | None = None) -> Reply:
        """Start `services` (default: all) and what they depend on; `nodes`: on those nodes only."""
        return await self.request(StartServices(cluster_id=cluster_id, services=_opt_list(services), dry_run=dry_run,
                                                nodes=_opt_list(nodes),
                                                **self._common(request_id, requested_by)), tenant=tenant)

    async def stop_services(self, cluster_id: str, services: Iterable[str] | None = None, *, dry_run: bool = False,
                            tenant: str | None = None, request_id: str | None = None, requested_by: str | None = None,
                            nodes: Iterable[str] | None = None) -> Reply:
        """Stop `services` (default: all) and what depends on them; `nodes`: on those nodes only
        (they are meant to stay stopped there)."""
        return await self.request(StopServices(cluster_id=cluster_id, services=_opt_list(services), dry_run=dry_run,
                                               nodes=_opt_list(nodes),
                                               **self._common(request_id, requested_by)), tenant=tenant)

    async def restart_services(self, cluster_id: str, services: Iterable[str] | None = None, *, dry_run: bool = False,
                               tenant: str | None = None, request_id: str | None = None, requested_by: str | None = None,
                               nodes: Iterable[str] | None = None) -> Reply:
        return await self.request(RestartServices(cluster_id=cluster_id, services=_opt_list(services), dry_run=dry_run,
                                                  nodes=_opt_list(nodes),
                                                  **self._common(request_id, requested_by)), tenant=tenant)

    async def upgrade_service(self, cluster_id: str, service: str, *, dry_run: bool = False, tenant: str | None = None,
                              request_id: str | None = None, requested_by: str | None = None) -> Reply:
        return await self.request(UpgradeService(cluster_id=cluster_id, service=service, dry_run=dry_run,
                                                 **self._common(request_id, requested_by)), tenant=tenant)

    async def rollback_cluster(self, cluster_id: str, to_job: str, *, dry_run: bool = False, tenant: str | None = None,
                               request_id: str | None = None, requested_by: str | None = None) -> Reply:
        """Back to the cluster as it was before job `to_job`."""
        return await self.request(RollbackCluster(cluster_id=cluster_id, to_job=to_job, dry_run=dry_run,
                                                  **self._common(request_id, requested_by)), tenant=tenant)

    async def apply_plan(self, plan_id: str, *, tenant: str | None = None, request_id: str | None = None,
                         requested_by: str | None = None) -> Reply:
        """Run the plan a dry run saved (its `plan_id`), exactly, or be refused if the cluster
        or the catalog changed since."""
        return await self.request(ApplyPlan(plan_id=plan_id, **self._common(request_id, requested_by)), tenant=tenant)

    async def extend_lease(self, cluster_id: str, *, by_s: float | None = None, until: datetime | None = None,
                           tenant: str | None = None, request_id: str | None = None, requested_by: str | None = None) -> Reply:
        """Move the cluster's lease expiry later (default: by the template's step); answered
        `LeaseExtended`."""
        return await self.request(ExtendLease(cluster_id=cluster_id, by_s=by_s, until=until,
                                              **self._common(request_id, requested_by)), tenant=tenant)

    async def pause_job(self, job_id: str, *, tenant: str | None = None, request_id: str | None = None,
                        requested_by: str | None = None) -> Reply:
        return await self.request(PauseJob(job_id=job_id, **self._common(request_id, requested_by)), tenant=tenant)

    async def resume_job(self, job_id: str, *, tenant: str | None = None, request_id: str | None = None,
                         requested_by: str | None = None) -> Reply:
        return await self.request(ResumeJob(job_id=job_id, **self._common(request_id, requested_by)), tenant=tenant)

    async def cancel_job(self, job_id: str, *, tenant: str | None = None, request_id: str | None = None,
                         requested_by: str | None = None) -> Reply:
        return await self.request(CancelJob(job_id=job_id, **self._common(request_id, requested_by)), tenant=tenant)

    async def retry_job(self, job_id: str, *, tenant: str | None = None, request_id: str | None = None,
                        requested_by: str | None = None) -> Reply:
        return await self.request(RetryJob(job_id=job_id, **self._common(request_id, requested_by)), tenant=tenant)


def _opt_list(items: Iterable[str] | None) -> list[str] | None:
    return list(items) if items is not None else None
