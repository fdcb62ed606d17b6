"""Coopr's config macros, expanded per task (pure; coopr-facts §1.9, Coopr's `macro` package): the provisioner
expands them (services/provisioner/nodes.py), the catalog's validation checks them.

A string value anywhere in a cluster's config may hold macros between `%` signs; before a
plugin sees a non-hardware task, each is replaced by what it names, seen from the task's node:

    %host.service.<svc>%            host names of the nodes with <svc>, joined by ","
    %ip.service.<svc>%              their bind_v4 addresses (Coopr's default address type)
    %ip.<type>.service.<svc>%       their <type> addresses (access_v4, bind_v4, ...)
    %host.self%  %ip.self%  %ip.<type>.self%      this node's
    %host.self.service.<svc>%  %ip.self.service.<svc>%   the same (Coopr's docs name these too)
    %num.service.<svc>%             how many nodes have <svc>
    %instance.self.service.<svc>%   this node's 1-based position among the nodes with <svc>
    %num.self.service.<svc>%        the same (the name in Coopr's parser grammar)
    %cluster.owner%                 who created the cluster
    %host.service.<svc>[i]%  %ip[.<type>].service.<svc>[i]%   the i-th (0-based) node's only
    %join(<list>,'<sep>')%  %join(map(<list>,'<format>'),'<sep>')%  %map(<list>,'<format>')%
        map puts each element in place of `$` in the format (`$$` is a `$`); join joins with <sep>

As in Coopr: nodes are in node-number order; `%%` is not a macro (it is kept as it is); a
macro about a service the cluster does not have (or, for `instance.self`, that this node does
not run) is left as it is. Unlike Coopr, whitespace after a comma is allowed. An ill-formed
macro, an instance past the last node, or a node without the address asked for is an error
naming the macro and where it is in the config (`MacroError`): the task fails with it.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.catalog import HARDWARE_ACTIONS
from contracts.tasks import NodeInfo, TaskMessage

DEFAULT_IP_TYPE = "bind_v4"
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class MacroError(Exception):
    """An expansion that cannot be done; the message names the macro. `permanent` unless it
    waits on a node's facts (an address, a host name, which its create reports): a retry
    expands the same config against the same layout, and fails the same way."""

    def __init__(self, message: str, *, permanent: bool = True) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class Expression:
    name: str
    instance: int | None = None
    format: str | None = None
    separator: str = ","


@dataclass(frozen=True)
class Scope:
    """What a macro is expanded against: the task's node, every node, the cluster's owner."""

    node: NodeInfo
    nodes: Mapping[str, NodeInfo]
    owner: str = ""

    def with_service(self, service: str) -> list[NodeInfo]:
        return sorted((n for n in self.nodes.values() if service in n.services), key=lambda n: (n.nodenum, n.id))


# -- parsing ----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def fail(self, why: str) -> MacroError:
        return MacroError(f"{why} at position {self.pos}")

    def take(self, word: str) -> bool:
        if self.text.startswith(word, self.pos):
            self.pos += len(word)
            return True
        return False

    def expect(self, char: str) -> None:
        if not self.take(char):
            raise self.fail(f"{char!r} expected")

    def comma(self) -> None:
        self.expect(",")
        while self.take(" "):
            pass

    def literal(self) -> str:
        quote = self.text[self.pos:self.pos + 1]
        if quote not in ("'", '"'):
            raise self.fail("a quoted string expected")
        end = self.text.find(quote, self.pos + 1)
        if end < 0:
            raise self.fail(f"no closing {quote}")
        value, self.pos = self.text[self.pos + 1:end], end + 1
        return value

    def basic(self) -> tuple[str, int | None]:
        match = _NAME.match(self.text, self.pos)
        if match is None:
            raise self.fail("a macro name expected")
        self.pos = match.end()
        instance = None
        if self.take("["):
            digits = re.match(r"\d+", self.text[self.pos:])
            if digits is None:
                raise self.fail("an instance number expected")
            self.pos += digits.end()
            instance = int(digits.group())
            self.expect("]")
        return match.group(), instance

    def inner(self) -> tuple[str, int | None, str | None]:
        if self.take("map("):
            name, instance = self.basic()
            self.comma()
            fmt = self.literal()
            self.expect(")")
            return name, instance, fmt
        name, instance = self.basic()
        return name, instance, None

    def expression(self) -> Expression:
        separator = ","
        if self.take("join("):
            name, instance, fmt = self.inner()
            self.comma()
            separator = self.literal()
            self.expect(")")
        else:
            name, instance, fmt = self.inner()
        if self.pos != len(self.text):
            raise self.fail("unexpected characters after the macro")
        _kind(name)  # an unknown name is a syntax error, as in Coopr
        return Expression(name, instance, fmt, separator)


def parse(macro: str) -> Expression:
    """One macro, without its `%` signs."""
    return _Parser(macro).expression()


def _kind(name: str) -> tuple[str, str, str]:
    """(what, ip type, service) of a macro name: what is host, ip, num, instance, owner."""
    if name == "cluster.owner":
        return "owner", "", ""
    if name == "host.self":
        return "host-self", "", ""
    if name == "ip.self":
        return "ip-self", DEFAULT_IP_TYPE, ""
    for prefix, what in (("host.self.service.", "host-self"), ("ip.self.service.", "ip-self"),
                         ("host.service.", "host"), ("num.service.", "num"),
                         ("instance.self.service.", "instance"), ("num.self.service.", "instance"),
                         ("ip.service.", "ip")):
        if name.startswith(prefix):
            return what, DEFAULT_IP_TYPE, _service(name, prefix)
    if name.startswith("ip."):
        iptype, _, rest = name[3:].partition(".")
        if iptype and rest == "self":
            return "ip-self", iptype, ""
        if iptype and rest.startswith("service."):
            return "ip", iptype, _service(rest, "service.")
    raise MacroError(f"{name!r} is not a macro Coopr knows")


def _service(name: str, prefix: str) -> str:
    service = name[len(prefix):]
    if not service:
        raise MacroError(f"{name!r} names no service")
    return service


# -- evaluating -------------------------------------------------------------------------------


def _address(node: NodeInfo, iptype: str) -> str:
    ip = node.ipaddresses.get(iptype)
    if not ip:
        known = ", ".join(sorted(node.ipaddresses)) or "none yet"
        raise MacroError(f"node {node.hostname or node.id} has no {iptype} address (it has: {known})", permanent=False)
    return ip


def _host(node: NodeInfo) -> str:
    if not node.hostname:
        raise MacroError(f"node {node.id} has no host name", permanent=False)
    return node.hostname


def evaluate(expr: Expression, scope: Scope) -> list[str] | None:
    """The values a macro stands for; None when it is left as it is (see the module doc)."""
    what, iptype, service = _kind(expr.name)
    if expr.instance is not None and what not in ("host", "ip"):
        raise MacroError(f"{expr.name!r} takes no instance number")
    if what == "owner":
        return [scope.owner]
    if what == "host-self":
        return [_host(scope.node)]
    if what == "ip-self":
        return [_address(scope.node, iptype)]
    nodes = scope.with_service(service)
    if what == "num":
        return [str(len(nodes))]
    if what == "instance":
        ids = [n.id for n in nodes]
        return [str(ids.index(scope.node.id) + 1)] if scope.node.id in ids else None
    if not nodes:
        return None
    if expr.instance is not None:
        if expr.instance >= len(nodes):
            raise MacroError(f"there are fewer than {expr.instance + 1} nodes with {service}")
        nodes = [nodes[expr.instance]]
    return [_host(n) if what == "host" else _address(n, iptype) for n in nodes]


def _format(value: str, fmt: str | None) -> str:
    if fmt is None:
        return value
    return "$".join(part.replace("$", value) for part in fmt.split("$$"))


def render(expr: Expression, scope: Scope) -> str | None:
    values = evaluate(expr, scope)
    if values is None:
        return None
    return expr.separator.join(_format(v, expr.format) for v in values)


# -- finding macros in text and in a config -----------------------------------------------------


def _next_percent(text: str, pos: int) -> int:
    """Coopr's rule: `%%` is skipped (kept as it is), not an empty macro."""
    while True:
        pos = text.find("%", pos)
        if pos < 0 or not text.startswith("%%", pos):
            return pos
        pos += 2


def macros_in(text: str) -> list[str]:
    """The macros of a text (without `%`), in order."""
    found, pos = [], 0
    while (start := _next_percent(text, pos)) >= 0 and (end := _next_percent(text, start + 1)) >= 0:
        found.append(text[start + 1:end])
        pos = end + 1
    return found


def expand_text(text: str, scope: Scope) -> str:
    out, pos = [], 0
    while (start := _next_percent(text, pos)) >= 0 and (end := _next_percent(text, start + 1)) >= 0:
        macro = text[start + 1:end]
        try:
            value = render(parse(macro), scope)
        except MacroError as err:
            raise MacroError(f"macro %{macro}%: {err}", permanent=err.permanent) from None
        out.append(text[pos:start])
        out.append(f"%{macro}%" if value is None else value)
        pos = end + 1
    out.append(text[pos:])
    return "".join(out)


def _path(path: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(top)"


def expand(config: Any, scope: Scope, path: tuple[str | int, ...] = ()) -> Any:
    """The config with every macro in its string values expanded (keys are not expanded)."""
    if isinstance(config, str):
        if "%" not in config:
            return config
        try:
            return expand_text(config, scope)
        except MacroError as err:
            raise MacroError(f"{err} (in config {_path(path)})", permanent=err.permanent) from None
    if isinstance(config, Mapping):
        return {k: expand(v, scope, (*path, k)) for k, v in config.items()}
    if isinstance(config, list):
        return [expand(v, scope, (*path, i)) for i, v in enumerate(config)]
    return config


def problems(config: Any, path: tuple[str | int, ...] = ()) -> list[str]:
    """Ill-formed macros of a config (a template's), found without a cluster: what Coopr's
    `Expander.validate` refuses."""
    if isinstance(config, str):
        found = []
        for macro in macros_in(config):
            try:
                parse(macro)
            except MacroError as err:
                found.append(f"macro %{macro}% in config {_path(path)}: {err}")
        return found
    if isinstance(config, Mapping):
        return [p for k, v in config.items() for p in problems(v, (*path, k))]
    if isinstance(config, list):
        return [p for i, v in enumerate(config) for p in problems(v, (*path, i))]
    return []


def _parsed(config: Any) -> Iterator[Expression]:
    """The well-formed macros of a config (ill-formed ones name nothing: the task that expands
    them fails on its own)."""
    if isinstance(config, str):
        for macro in macros_in(config) if "%" in config else ():
            try:
                yield parse(macro)
            except MacroError:
                continue
    elif isinstance(config, Mapping):
        for v in config.values():
            yield from _parsed(v)
    elif isinstance(config, list):
        for v in config:
            yield from _parsed(v)


def services_named(config: Any, kinds: frozenset[str] | None = None) -> set[str]:
    """The services whose nodes the config's macros name (`%ip.service.nats%`, `%num.service.x%`,
    ...): what a node's expanded config depends on besides the config itself, so a layout that
    changes who has them makes a config written before it stale (`readmodel/lifecycle.py`).
    `kinds`: only macros of these kinds (`_kind`'s first part: host, ip, num, instance...)."""
    found = set()
    for expr in _parsed(config):
        try:
            what, _, service = _kind(expr.name)
        except MacroError:
            continue
        if service and (kinds is None or what in kinds):
            found.add(service)
    return found


def instances_named(config: Any) -> dict[str, int]:
    """For each service a macro names by instance (`%host.service.zk[2]%`), the highest
    instance named: a layout with fewer nodes of it fails the task that expands the macro."""
    out: dict[str, int] = {}
    for expr in _parsed(config):
        if expr.instance is None:
            continue
        try:
            service = _kind(expr.name)[2]
        except MacroError:
            continue
        if service:
            out[service] = max(out.get(service, 0), expr.instance)
    return out


NODE_VALUES = frozenset({"host", "ip"})
"""The macro kinds that read other nodes' values a provider records (a host name, an address:
the create's or the confirm's results); `num` and `instance` read the layout only."""


def services_read(config: Any) -> set[str]:
    """The services whose nodes' host names or addresses the macros read (`%ip.service.nats%`,
    `%join(map(host.service.zk,'$:2181'),',')%`, `%ip.access_v4.service.x[0]%`): a task that
    expands them waits for those nodes' confirm in a plan that makes them (`plan.py`)."""
    return services_named(config, NODE_VALUES)


def expand_task(task: TaskMessage) -> TaskMessage:
    """The task with its config's macros expanded from its node, the cluster's nodes (resolved
    already: `nodes.py`) and owner; the task itself for a hardware task or a config without
    macros. Raises `MacroError`."""
    if task.action in HARDWARE_ACTIONS or not task.config:  # Coopr: non-hardware tasks only
        return task
    # A view, not a copy: a copy of a 10,000-node map per task would cost more than the task.
    scope = Scope(node=task.node, nodes=ChainMap({task.node.id: task.node}, task.nodes), owner=task.cluster_owner)
    config = expand(task.config, scope)
    return task if config == task.config else task.model_copy(update={"config": config})
