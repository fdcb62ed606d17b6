"""`muster ps`: the processes of the running `muster up` (docs/runtime.md, "Its processes").

What `muster up` says of itself in `<data-dir>/deployment.json` (rewritten at every start,
restart and give-up), checked against the machine: each process, its PID, whether that PID is
alive now and still one of ours (a PID is reused once its process is gone), how often it was
started again, those given up on and why, and where each logs. Reading the file alone, it needs
no bus, no tracker and no token: it answers when they are the ones down.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from muster.cli_support import FilePath, echo_json, guarded, json_option, running_deployment
from muster.tables import out, print_rows

UP = "muster up"


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int | None
    alive: bool
    restarts: int
    given_up: str | None
    log: str | None

    @property
    def state(self) -> str:
        if self.given_up is not None:
            return "given up"
        if self.pid is None:
            return "?"
        return "alive" if self.alive else "gone"


def alive(pid: int, name: str) -> bool:
    """The PID runs, and is still the process named (nats-server, or a muster one), where
    /proc says: a PID taken by another program since is not ours."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's: reused, unless /proc says otherwise
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc (not Linux): the signal's word stands
    wanted = b"nats-server" if name == "nats-server" else b"muster"
    return any(wanted in part for part in argv)


def processes(state: dict[str, Any], data_dir: Path, is_alive: Any = alive) -> list[Proc]:
    """`muster up` first, then each process it describes, running or given up on (pure but for
    `is_alive`). A `muster up` of an earlier version named no logs: where it writes them."""
    restarts = {str(k): int(v) for k, v in dict(state.get("restarts") or {}).items()}
    logs = {str(k): str(v) for k, v in dict(state.get("logs") or {}).items()}
    logs = logs or {name: str(data_dir.resolve() / ("nats/nats-server.log" if name == "nats-server" else f"logs/{name}.log"))
                    for name in [*dict(state.get("processes") or {}), *dict(state.get("given_up") or {})]}
    given_up = {str(k): str(v) for k, v in dict(state.get("given_up") or {}).items()}
    running = {str(k): int(v) for k, v in dict(state.get("processes") or {}).items()}
    up = int(state["pid"])
    found = [Proc(UP, up, is_alive(up, UP), 0, None, None)]
    for name, pid in running.items():
        found.append(Proc(name, pid, is_alive(pid, name), restarts.get(name, 0), None, logs.get(name)))
    for name, why in given_up.items():
        found.append(Proc(name, None, False, restarts.get(name, 0), why, logs.get(name)))
    return found


def unanswered(data_dir: Path | None, name: str, url: str, is_alive: Any = alive) -> str | None:
    """What to tell a command that `name` (`tracker`, `nats-server`) did not answer at `url`, when
    that is the URL of the `muster up` running on `data_dir`: whether it is being started again,
    alive but silent, or given up on, and where to look; None otherwise (the caller's own words,
    "is `muster up` running?", stand). Walk of session 37: with the tracker killed, or nats-server
    stopped, the commands asked whether `muster up` was running (it was, restarting it) and, of a
    silent plain server, whether it needed a tls:// URL."""
    from muster.bus.server import DataDirLock

    try:
        if data_dir is None or not DataDirLock(data_dir).in_use():
            return None
        state = json.loads((data_dir / DataDirLock.STATE).read_text())
    except (OSError, ValueError):
        return None
    saved = state.get(f"{name.removesuffix('-server')}_url") if isinstance(state, dict) else None
    if not saved or str(saved).rstrip("/") != url.rstrip("/"):
        return None
    try:
        found = {p.name: p for p in processes(state, data_dir, is_alive)}
    except (KeyError, TypeError, ValueError):
        return None
    up, proc = found[UP], found.get(name)
    if proc is None or not up.alive:
        return None
    where = f"`muster up` (pid {up.pid}) runs on {data_dir}"
    log = f"{proc.log} says" if proc.log else "its log says"
    if proc.given_up is not None:
        return f"{where} and gave up on its {name}: {proc.given_up}; {log} why it stopped"
    if not proc.alive:
        return (f"{where} and starts its {name} again (it exited; restarted {_times(proc.restarts)} so far): try again in a "
                f"moment; `muster ps` shows it, {log} why it stopped")
    return (f"{where} and its {name} (pid {proc.pid}) is alive but did not answer: it is starting again (restarted "
            f"{_times(proc.restarts)} so far) or stuck; `muster ps` shows it, {log} more")


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


@click.command("ps")
@click.option("--data-dir", type=FilePath(file_okay=False, path_type=Path), default=Path(".muster"), show_default=True,
              envvar="MUSTER_DATA_DIR", help="the deployment's data directory ($MUSTER_DATA_DIR)")
@json_option
@guarded
def ps(data_dir: Path, as_json: bool) -> None:
    """The processes of the `muster up` running on a data directory: each one's PID, whether it
    is alive, how often it was restarted, those given up on and why, and its log file."""
    state = running_deployment(data_dir, f"`muster up --data-dir {data_dir}` starts one")
    found = processes(state, data_dir)
    if as_json:
        echo_json({"data_dir": str(data_dir.resolve()), "pid": state["pid"], "started_at": state.get("started_at"),
                   "nats_url": state.get("nats_url"), "tracker_url": state.get("tracker_url"),
                   "processes": [asdict(p) | {"state": p.state} for p in found]})
        return
    rows = [[p.name, str(p.pid) if p.pid is not None else "-", p.state, str(p.restarts), p.log or "-"] for p in found]
    print_rows(f"muster up on {data_dir} (started {state.get('started_at') or '?'})", ["process", "pid", "state", "restarts", "log"],
               rows)
    for p in found:
        if p.given_up is not None:
            out.print(f"{p.name} given up: {p.given_up}", soft_wrap=True, highlight=False)
    if found[0].state == "gone":
        out.print(f"`muster up` (pid {found[0].pid}) is gone, and what is left of its processes holds the data directory: "
                  f"`muster down --data-dir {data_dir}` stops them", soft_wrap=True, highlight=False)
    gone = [p.name for p in found[1:] if p.state == "gone"]
    if gone:
        out.print(f"not running: {', '.join(gone)} (`muster up` starts {'each' if len(gone) > 1 else 'it'} again after a "
                  "backoff and says so; the log says why it exited)", soft_wrap=True, highlight=False)
