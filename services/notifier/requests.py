"""The requests the notifier answers (`muster.gov.<tenant>.<principal>.notify-test|notify-check`).

A test notification is sent now (`muster notify test`); the check is what the governance service
asks before it stores a subscription (`muster notify add`): the secrets it names that this
notifier lacks and a webhook destination the operator's rule refuses (docs/governance.md).

Both need what listing the tenant's subscriptions needs (`read` on the tenant); the requester is
the subject's principal, as for every governance request.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import structlog
from nats.aio.msg import Msg
from pydantic import ValidationError

from contracts import subjects
from contracts.errors import describe_validation_error
from contracts.governance import GovernanceAnswer, GovernanceRequest, Subscription
from contracts.limits import not_strict_json
from muster.bus.answers import answer_on_inbox
from services.auth.domain.authz import Decision, may_govern, unmade_tenant
from services.auth.domain.state import IdentityState

from .adapters.delivery import Deliveries
from .app import Notifier

log = structlog.get_logger("muster.notifier")
TEST_VERB = "notify-test"
CHECK_VERB = "notify-check"
VERBS = (TEST_VERB, CHECK_VERB)

Lookup = Callable[[str, str | None], Awaitable[Subscription | None]]
"""(tenant, name) -> a subscription just made, which the mirror has not folded yet."""


class NotARequest(ValueError):
    """A body that is not strict JSON (NaN, -1e999, nesting past the limit)."""


class NotifierRequests:
    def __init__(self, notifier: Notifier, deliveries: Deliveries, from_log: Lookup,
                 identity: Callable[[], IdentityState | None]) -> None:
        self.notifier, self.deliveries, self.from_log, self.identity = notifier, deliveries, from_log, identity

    async def on_request(self, msg: Msg) -> None:
        try:
            tenant, principal, rest = subjects.parse_request(msg.subject.replace(subjects.GOV, "muster.ops", 1))
            if (not_json := not_strict_json(msg.data)) is not None:  # (as the governance service reads its requests)
                raise NotARequest(f"the body {not_json}")
            request = GovernanceRequest.model_validate_json(msg.data)
            allowed = self._may(principal, tenant)
            unmade = self._unmade(principal, tenant)
            if unmade:  # as the governance service, the tracker and the planner refuse it
                reply = GovernanceAnswer(ok=False, reason=unmade, code="invalid")
            elif not allowed:
                reply = GovernanceAnswer(ok=False, reason=allowed.reason or "not allowed", code="forbidden")
            elif rest[-1] == CHECK_VERB:
                reply = await self.check(tenant, request)
            else:
                reply = await self.test(tenant, request)
        except NotARequest as err:
            reply = GovernanceAnswer(ok=False, reason=f"not a governance request: {err}", code="invalid")
        except ValidationError as err:  # pydantic's own text was the answer ("1 validation error for ... errors.pydantic.dev")
            reply = GovernanceAnswer(ok=False, reason=f"not a governance request: {describe_validation_error(err)}"[:2000], code="invalid")
        except subjects.SubjectError as err:
            reply = GovernanceAnswer(ok=False, reason=str(err)[:500], code="invalid")
        except Exception:  # a bug must not leave a requester without an answer
            log.exception("notifier request failed", subject=msg.subject)
            reply = GovernanceAnswer(ok=False, reason="internal error in the notifier; see its log")
        await answer_on_inbox(msg, reply.model_dump_json().encode())

    def _unmade(self, principal: str, tenant: str) -> str:
        identity = self.identity()
        return unmade_tenant(identity.principals.get(principal), identity.tenants, tenant) if identity is not None else ""

    def _may(self, principal: str, tenant: str) -> Decision:
        identity = self.identity()
        if identity is None:
            return Decision(True)
        return may_govern(identity.principals.get(principal), identity.grants_of(principal), tenant, "subscription")

    async def test(self, tenant: str, request: GovernanceRequest) -> GovernanceAnswer:
        sub = next((s for s in self.notifier.subscriptions(tenant) if s.name == request.name), None) or \
            await self.from_log(tenant, request.name)
        if sub is None:
            return GovernanceAnswer(ok=False, reason=f"no subscription {request.name!r} in tenant {tenant!r}", code="not_found")
        outcome = await self.notifier.queue_test(tenant, sub, f"{sub.name}-test-{uuid.uuid4().hex[:12]}")
        return GovernanceAnswer(ok=outcome.ok, reason=outcome.error, items=[outcome.model_dump(mode="json")],
                                code=None if outcome.ok else "unavailable")

    async def check(self, tenant: str, request: GovernanceRequest) -> GovernanceAnswer:
        problems: list[str] = []
        warnings: list[str] = []
        for body in request.entities:
            try:
                sub = Subscription.model_validate(body)
            except ValidationError:
                continue  # the governance service refuses it, naming why
            found, warned = await self.deliveries.check(tenant, sub)
            problems += found
            warnings += warned
        if problems:
            return GovernanceAnswer(ok=False, reason=f"{len(problems)} problem{'s' if len(problems) != 1 else ''}",
                                    problems=problems, warnings=warnings, code="invalid")
        return GovernanceAnswer(ok=True, warnings=warnings)
