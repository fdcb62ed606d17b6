"""Whom a policy's message may be shown (docs/security.md, "What a refusal names").

A policy's `deny` and `warn` messages are its author's words, and may say what the policy was
given: a budget policy's `sprintf("tenant %v would spend %v an hour", [input.tenant.name,
input.tenant.per_hour])` says the tenant's total, which `GET /v1/cost` shows only with `read` on
every cluster, and a cost ceiling's says a price, which only `read` on the hardware type shows.
So a message is shown as written only to a reader who may read everything its policy read of
that kind (`reads`): the scopes `cluster:*` (the tenant's totals) and `catalog:hardwaretypes/<name>`
(a price in the plan's cost). Another reader is told which rule of which policy holds and why its
words are not shown (`sealed`). Which fields a policy reads is found in its source
(`references.reads_input`), as a budget's reservation finds it (decision 44): a policy reading
`input` whole reads them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from .policies import Finding
from .references import reads_cost, reads_tenant_totals

TOTALS = "cluster:*"
"""The scope whose `read` shows a tenant's totals (`input.tenant.clusters|nodes|per_hour`)."""
PRICE = "catalog:hardwaretypes/"

Reader = Callable[[str], bool]
"""May this reader read that scope (`cluster:*`, `catalog:hardwaretypes/<name>`)?"""


def reads(source: str, priced: Iterable[str]) -> tuple[str, ...]:
    """The scopes a reader needs `read` on to be shown this policy's messages: `cluster:*` when
    it reads the tenant's totals, each priced hardware type of the plan when it reads its cost."""
    out = [TOTALS] if reads_tenant_totals(source) else []
    if reads_cost(source):
        out += [PRICE + name for name in sorted(set(priced))]
    return tuple(out)


def reader(catalog: Callable[[str], bool] | None, totals: bool) -> Reader:
    """A reader from what the planner knows of a requester: its catalog reads (`<kind>/<name>`,
    None: all) and whether it reads the tenant's totals."""
    def may(scope: str) -> bool:
        if scope == TOTALS:
            return totals
        return catalog is None or catalog(scope.removeprefix("catalog:"))

    return may


def _what(hidden: Sequence[str]) -> str:
    said = ["the tenant's totals" if s == TOTALS else f"the price of {s.removeprefix(PRICE)}" for s in hidden]
    return ", ".join(said)


def sealed(rule: str, finding: Finding, hidden: Sequence[str], who: str | None) -> str:
    """What a reader is told of a message it may not be shown. `who` None: the job's record,
    which anyone who reads the job reads (the requester's answer says it to a requester that may)."""
    scopes = ", ".join(hidden)
    if who is None:
        return (f"a {rule} rule holds whose message is kept from the job's record: the policy reads {_what(hidden)} "
                f"(`read` on {scopes} shows it: a dry run of the request says it to whoever may)")
    where = "`muster history --governance`" if rule == "deny" else "a dry run of the same request"
    return (f"a {rule} rule holds whose message is not shown to {who}: the policy reads {_what(hidden)}, which {who} "
            f"may not read (`read` on {scopes}); a tenant admin reads it in {where}")


def shown(rule: str, findings: Iterable[Finding], reads_of: Mapping[str, Sequence[str]], may: Reader | None,
          who: str | None) -> list[Finding]:
    """`findings` as `who` is shown them: as written when it may read all its policy read (or
    `may` is None: no identities), else `sealed`. `who` None: the job's record, with `may` what
    a reader without grants may read (all of it on a bus without identities)."""
    out = []
    for f in findings:
        hidden = [s for s in reads_of.get(f.policy, ()) if may is not None and not may(s)]
        out.append(Finding(f.policy, f.version, sealed(rule, f, hidden, who)) if hidden else f)
    return out
