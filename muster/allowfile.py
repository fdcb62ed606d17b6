"""An allow file: more `--webhook-allow` entries, read at start and again on SIGHUP (`muster
reload`) by the notifier, the pool service and the planners (docs/governance.md, "Secrets and
receivers added while it runs").

The notifier's webhooks, the pool service's callbacks and the planners' check of a callback
when no pool service answers go by the same file, as by the same `--webhook-allow`.

A reload is all or nothing: a file that cannot be read, or has an entry that does not parse,
keeps what the process had and says why in its log (the file and the entry): a typo made while
it runs stops no delivery.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import structlog

from muster.destinations import ALLOW_OPTION, Allowed, AllowError

ALLOW_FILE_OPTION = f"{ALLOW_OPTION}-file"
ALLOW_FILE_ENV = "MUSTER_WEBHOOK_ALLOW_FILE"
ALLOW_FILE_HEADER = (
    "# Where the notifier's webhooks and the pool service's callbacks may go besides public addresses:\n"
    "# [TENANT=]HOST|CIDR[:PORT] entries, one or more a line (docs/governance.md, \"Where webhooks may go\"),\n"
    "# with `muster up --webhook-allow`'s. `muster reload` has the running notifiers, pool service and\n"
    "# planners read this file again.\n")
ALLOW_FILE_HELP = (f"more {ALLOW_OPTION} entries, one or more a line (# comments); read again on SIGHUP "
                   f"(`muster reload`) (${ALLOW_FILE_ENV})")


def allow_file_entries(path: str) -> list[str]:
    """The entries of an allow file: lines, `#` starting a comment; commas or spaces between entries."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise AllowError(f"{ALLOW_FILE_OPTION} {path}: cannot read it: {err}") from None
    return [line.split("#", 1)[0] for line in text.splitlines() if line.split("#", 1)[0].strip()]


@dataclass(frozen=True)
class AllowSettings:
    """The operator's entries: those given at start (fixed) and the file's (read again)."""

    allow: tuple[str, ...] = ()
    allow_file: str | None = None

    def allowed(self) -> Allowed:
        """Raises AllowError naming the entry (and the file it is in)."""
        if not self.allow_file:
            return Allowed.parse(self.allow)
        extra = allow_file_entries(self.allow_file)
        try:
            Allowed.parse(extra)
        except AllowError as err:
            raise AllowError(f"{self.allow_file}: {err}") from None
        return Allowed.parse([*self.allow, *extra])


def reload_allowed(settings: AllowSettings, apply: Callable[[Allowed], None], service: str) -> bool:
    """Read the entries again into `apply` (SIGHUP); on a problem keep what it had. Says
    `<service> reloaded` or `<service> not reloaded`: `muster up` waits for those words."""
    log = structlog.get_logger(f"muster.{service}")
    try:
        allowed = settings.allowed()
    except AllowError as err:
        log.error(f"{service} not reloaded", error=str(err), kept="the receivers it had")
        return False
    apply(allowed)
    log.info(f"{service} reloaded", allow_file=settings.allow_file or "", allowed_besides_public=str(allowed))
    return True


def on_sighup(stack: AsyncExitStack, reload: Callable[[], object]) -> None:
    """`reload` on every SIGHUP while the stack is open. Set before the service says it started:
    `muster up` sends SIGHUP only after that word, and a SIGHUP before the handler ends it."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reload)
    stack.callback(loop.remove_signal_handler, signal.SIGHUP)
