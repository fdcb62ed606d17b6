"""Which tasks to dispatch now: eager (a task goes when its own predecessors are done) or
staged (Coopr: a stage goes when the previous one is done). One running task per node in
both. Pure and deterministic.

`done` = succeeded tasks; `running` = dispatched and not finished (queued, claimed, in
progress), both best given as sets. A failed task waiting for a retry is neither, so it
comes back as ready. The `ready_*` functions look at the whole plan on every call; for plans
of many thousands of tasks keep a `Dispatcher`, which does the same incrementally.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from .model import Plan

__all__ = ["Dispatcher", "ready", "ready_eager", "ready_staged"]


def ready_eager(plan: Plan, done: Collection[str], running: Collection[str]) -> tuple[str, ...]:
    """Tasks to dispatch now: not done or running, every predecessor done, on a node with no
    running task; at most one per node (the first in `plan.priority`). In priority order."""
    busy = {plan.by_id[t].node for t in running}
    link_done: dict[int, bool] = {}

    def satisfied(i: int) -> bool:
        if i not in link_done:
            link_done[i] = all(s in done for s in plan.links[i][0])
        return link_done[i]

    out = []
    for task in plan.priority:
        node = plan.by_id[task].node
        if task in done or task in running or node in busy:
            continue
        if all(satisfied(i) for i in plan.in_links[task]):
            busy.add(node)
            out.append(task)
    return tuple(out)


def ready_staged(plan: Plan, done: Collection[str], running: Collection[str]) -> tuple[str, ...]:
    """Coopr's order: the tasks of the first unfinished stage that are not running yet; none
    of a later stage until every task of this one is done. In priority order."""
    for stage in plan.stages:
        pending = [t for t in stage if t not in done]
        if pending:
            return tuple(sorted((t for t in pending if t not in running), key=plan.rank.__getitem__))
    return ()


def ready(plan: Plan, done: Collection[str], running: Collection[str], mode: str = "eager") -> tuple[str, ...]:
    if mode == "eager":
        return ready_eager(plan, done, running)
    if mode == "staged":
        return ready_staged(plan, done, running)
    raise ValueError(f"unknown mode {mode!r}; modes are eager, staged")


class Dispatcher:
    """The same decisions as `ready_eager` / `ready_staged`, kept up to date incrementally
    (linear in the plan's size over a whole run). Deterministic; no IO."""

    def __init__(self, plan: Plan, mode: str = "eager", priority: Sequence[str] | None = None) -> None:
        """`priority`: every task id, most urgent first (default `plan.priority`), e.g. ranked
        by expected durations."""
        if mode not in ("eager", "staged"):
            raise ValueError(f"unknown mode {mode!r}; modes are eager, staged")
        self.plan, self.mode = plan, mode
        self.done: set[str] = set()
        self.running: set[str] = set()
        self._rank = plan.rank if priority is None else {t: i for i, t in enumerate(priority)}
        self._waiting = {t: len(plan.in_links[t]) for t in plan.index}
        self._link_left = [len(sources) for sources, _ in plan.links]
        self._ready: dict[str, set[str]] = {}  # node -> tasks whose predecessors are done
        self._busy: set[str] = set()  # nodes with a running task
        self._stage = 0
        for t, n in self._waiting.items():
            if n == 0:
                self._ready.setdefault(plan.by_id[t].node, set()).add(t)

    def start(self) -> list[str]:
        """The first tasks to dispatch."""
        if self.mode == "staged":
            return self._run(self.plan.stages[0]) if self.plan.stages else []
        return self._pick(self._ready)

    def finished(self, task: str) -> list[str]:
        """`task` succeeded: the tasks to dispatch now."""
        self.running.discard(task)
        self.done.add(task)
        node = self.plan.by_id[task].node
        self._busy.discard(node)
        touched = {node}
        for i in self.plan.out_links[task]:
            self._link_left[i] -= 1
            if self._link_left[i] == 0:
                for t in self.plan.links[i][1]:
                    self._waiting[t] -= 1
                    if self._waiting[t] == 0:
                        other = self.plan.by_id[t].node
                        self._ready.setdefault(other, set()).add(t)
                        touched.add(other)
        if self.mode == "staged":
            if self.running:
                return []
            self._stage += 1
            return self._run(self.plan.stages[self._stage]) if self._stage < len(self.plan.stages) else []
        return self._pick({n: self._ready.get(n, set()) for n in touched})

    def released(self, task: str) -> list[str]:
        """`task` failed and may be retried: it is ready again. The tasks to dispatch now (in
        eager mode possibly another task of the same node first)."""
        self.running.discard(task)
        node = self.plan.by_id[task].node
        self._busy.discard(node)
        if self.mode == "staged":
            return self._run([task])
        self._ready.setdefault(node, set()).add(task)
        return self._pick({node: self._ready[node]})

    def _pick(self, candidates: dict[str, set[str]]) -> list[str]:
        out = []
        for node, tasks in candidates.items():
            if tasks and node not in self._busy:
                task = min(tasks, key=self._rank.__getitem__)
                tasks.discard(task)
                out.append(task)
        return self._run(out)

    def _run(self, tasks: Iterable[str]) -> list[str]:
        out = sorted(tasks, key=self._rank.__getitem__)
        self.running.update(out)
        self._busy.update(self.plan.by_id[t].node for t in out)
        return out


class ReadyIndex:
    """`ready_eager`'s answer kept up to date as tasks start, finish and fail: the job asks it
    after every outcome, and a scan of the whole plan each time made a 10,000-node create
    quadratic. O(changes) per update; `ready()` looks only at nodes that have a task whose
    predecessors are all done. Deterministic; no IO."""

    def __init__(self, plan: Plan, done: Iterable[str], running: Iterable[str]) -> None:
        self.plan = plan
        self.done = {t for t in done if t in plan.index}
        self.running = {t for t in running if t in plan.index}
        self._link_left = [sum(1 for s in sources if s not in self.done) for sources, _ in plan.links]
        self._waiting = {t: sum(1 for i in plan.in_links[t] if self._link_left[i]) for t in plan.index}
        self._busy: dict[str, int] = {}
        for t in self.running:
            node = plan.by_id[t].node
            self._busy[node] = self._busy.get(node, 0) + 1
        self._candidates: dict[str, set[str]] = {}
        """node -> its tasks whose predecessors are all done, neither done nor running."""
        for t, waiting in self._waiting.items():
            if not waiting:
                self._offer(t)

    def _offer(self, task: str) -> None:
        if task not in self.done and task not in self.running:
            self._candidates.setdefault(self.plan.by_id[task].node, set()).add(task)

    def _withdraw(self, task: str) -> None:
        tasks = self._candidates.get(self.plan.by_id[task].node)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._candidates[self.plan.by_id[task].node]

    def started(self, task: str) -> None:
        if task not in self.plan.index or task in self.running:
            return
        self.running.add(task)
        node = self.plan.by_id[task].node
        self._busy[node] = self._busy.get(node, 0) + 1
        self._withdraw(task)

    def _stopped(self, task: str) -> None:
        if task in self.running:
            self.running.discard(task)
            node = self.plan.by_id[task].node
            self._busy[node] -= 1
            if not self._busy[node]:
                del self._busy[node]

    def finished(self, task: str) -> None:
        if task not in self.plan.index or task in self.done:
            return
        self._stopped(task)
        self._withdraw(task)
        self.done.add(task)
        for i in self.plan.out_links[task]:
            self._link_left[i] -= 1
            if not self._link_left[i]:
                for target in self.plan.links[i][1]:
                    self._waiting[target] -= 1
                    if not self._waiting[target]:
                        self._offer(target)

    def released(self, task: str) -> None:
        """An attempt failed: the task is neither running nor done, ready again if it was."""
        if task not in self.plan.index:
            return
        self._stopped(task)
        if not self._waiting[task]:
            self._offer(task)

    def segment(self, head: str) -> list[str]:
        """The tasks of `head`'s node that become ready only through `head` and each other, in
        the order they would run (each the first by rank among those it lets go): what can go
        with it as one unit (a segment, docs/decisions/0058)."""
        plan = self.plan
        node = plan.by_id[head].node
        members = {head}
        covered: dict[int, int] = {}
        out: list[str] = []
        last = head
        while True:
            for i in plan.out_links[last]:
                covered[i] = covered.get(i, 0) + 1
            nxt = None
            for i in plan.out_links[last]:
                if self._link_left[i] - covered[i]:
                    continue
                for t in plan.links[i][1]:
                    if (t in members or t in self.done or t in self.running or plan.by_id[t].node != node
                            or any(self._link_left[j] - covered.get(j, 0) for j in plan.in_links[t])):
                        continue
                    if nxt is None or plan.rank[t] < plan.rank[nxt]:
                        nxt = t
            if nxt is None:
                return out
            members.add(nxt)
            out.append(nxt)
            last = nxt

    def ready(self) -> tuple[str, ...]:
        rank = self.plan.rank
        picks = [min(tasks, key=rank.__getitem__) for node, tasks in self._candidates.items() if node not in self._busy]
        return tuple(sorted(picks, key=rank.__getitem__))

    @property
    def all_done(self) -> bool:
        return len(self.done) == len(self.plan.index)
