"""A service process's log: one JSON object a line on stderr (`muster up` copies it to
`<data-dir>/logs/<service>.log`), or structlog's console lines in a terminal.

structlog writes muster's own lines. What the libraries say through the standard `logging`
module (OpenTelemetry's exporter when the collector is down, asyncio, nats-py), what
`warnings.warn` says, and an exception nothing caught went to stderr as plain text before,
in the middle of the JSON. They are routed here through the same renderer, from the same lock
(a line written from the exporter's thread is never cut by one of ours), each scrubbed of
what may be a secret first: their text is the library's, not ours to trust.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import types
import urllib.parse
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

from contracts.secrets import MASK, secret_name
from muster import tracing

HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
"""Their values often hold a collector's API key (`Authorization=Bearer ...`)."""
SECRET_VARIABLES = ("MUSTER_TOKEN", "MUSTER_AUTH_SYSTEM_TOKEN", "MUSTER_BUS_SECRET", "MUSTER_AUTH_ISSUER_SEED")
TOKEN = re.compile(r"\b(mst_[a-z0-9-]+_[0-9a-f]{12})_[0-9a-f]{64}\b")
USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/\s@'\"]+@", re.IGNORECASE)
QUERY_VALUE = re.compile(r"([?&])([^=&\s'\"#]+)=([^&\s'\"#]*)")
_CONFIGURED: list[tuple[str, object]] = []
"""(service, stderr) the log was last set up for: a service that sets it up before `main_for`
does (the provisioner, before its plugins load and say so) is not set up twice (the same lines,
a second "in clear" warning)."""


def configure_logging(service: str) -> None:
    """Once per service and stderr: a second call for the same ones changes nothing."""
    if _CONFIGURED == [(service, sys.stderr)]:
        return
    _CONFIGURED[:] = [(service, sys.stderr)]
    level = getattr(logging, os.environ.get("MUSTER_LOG_LEVEL", "INFO").upper(), logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    )
    traced = tracing.configure(service)  # on when the OTEL_* variables ask (docs/tracing.md)
    stamped: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        _service(service),
        *([tracing.log_ids] if traced else []),
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
    ]
    structlog.configure(
        processors=[*stamped, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        # Configured once per process: a module's logger need not be rebuilt at every call
        # (a few calls per task in a busy provisioner).
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
    route_libraries(service, stamped, renderer, level)
    if traced and (clear := tracing.in_clear()) is not None:  # once, at the start of the service's log
        structlog.get_logger().warning(clear)


def route_libraries(service: str, stamped: list[structlog.typing.Processor], renderer: structlog.typing.Processor,
                    level: int, env: Mapping[str, str] = os.environ) -> None:
    """The standard `logging` module's records, `warnings`, and uncaught exceptions (of the main
    thread and any other) through `renderer`. Libraries speak at WARNING and above unless
    MUSTER_LOG_LEVEL=DEBUG: what reached stderr before (Python's last-resort handler) and no more
    (aiohttp's access log, asyncssh's INFO chatter stay off)."""
    scrub = Scrubber.from_env(env)
    handler = _SameLock(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*stamped, structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder(allow=["error"])],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                    scrub, renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if level <= logging.DEBUG else max(level, logging.WARNING))
    logging.captureWarnings(True)
    crashed = logging.getLogger(f"muster.{service}")

    # `error` is what `muster up` quotes of a child's last line when it exits during its start.
    def uncaught(kind: type[BaseException], err: BaseException, tb: types.TracebackType | None) -> None:
        crashed.critical("uncaught exception", exc_info=(kind, err, tb), extra={"error": _said(err)})

    def uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            crashed.critical("uncaught exception in thread %s", args.thread.name if args.thread else "?",
                             exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
                             extra={"error": _said(args.exc_value)})

    sys.excepthook = uncaught
    threading.excepthook = uncaught_in_thread


def _said(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def plain_scrubbed(env: Mapping[str, str] = os.environ) -> None:
    """A command's stderr (a person reads it, not `jq`): the libraries' lines as plain text, as
    Python's last-resort handler writes them, but scrubbed as a service's are (the exporter's
    complaint names the collector's URL, query and all)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(_PlainScrubbed(Scrubber.from_env(env)))
        root.addHandler(handler)


class _PlainScrubbed(logging.Formatter):
    def __init__(self, scrub: Scrubber) -> None:
        super().__init__("%(message)s")
        self.scrub = scrub

    def format(self, record: logging.LogRecord) -> str:
        return self.scrub.text(super().format(record))


class _SameLock(logging.Handler):
    """Writes through structlog's printer of the same file, under its lock: a library's line
    from another thread and one of ours never share a line."""

    def __init__(self, file: Any) -> None:
        super().__init__()
        self.printer = structlog.PrintLogger(file)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.printer.msg(self.format(record))
        except Exception:  # noqa: BLE001 - logging's own rule: a record that cannot be written is reported, never raised
            self.handleError(record)


def _service(service: str) -> structlog.typing.Processor:
    """The service's name on every line, one from a thread of its own or from a callback run
    in a context made before it was bound too (a planner's lease renewals had none)."""

    def named(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event.setdefault("service", service)
        return event

    return named


class Scrubber:
    """A structlog processor masking, in every text of a library's line: the values of the
    OTLP header variables and of the process's own token variables, a muster token's secret,
    the user and password of a URL, and a URL's query value under a secret's name (`api_key=`)."""

    def __init__(self, values: list[str]) -> None:
        self.values = sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Scrubber:
        values = [env.get(name, "") for name in SECRET_VARIABLES]
        for name in HEADER_VARIABLES:
            for pair in env.get(name, "").split(","):
                _, _, value = pair.partition("=")
                value = value.strip()
                plain = urllib.parse.unquote(value)
                values += [value, plain, *plain.split(" ", 1)[1:]]  # `Bearer <key>`: the key alone too
        return cls(values)

    def text(self, said: str) -> str:
        for value in self.values:
            said = said.replace(value, MASK)
        said = TOKEN.sub(lambda m: f"{m.group(1)}_{MASK}", said)
        said = USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", said)
        return QUERY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}={MASK}" if secret_name(m.group(2)) else m.group(0), said)

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in event.items():
            if isinstance(value, str):
                event[key] = self.text(value)
        return event
