"""The OpenTelemetry SDK set up for this process, from the standard variables (`muster.tracing`
is the API the services use; docs/tracing.md). Imported by it, this module imports nothing of
the SDK until `configure` is called and the variables ask for traces."""

from __future__ import annotations

import contextvars
import ipaddress
import os
import socket
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from muster.destinations import printable

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

provider: TracerProvider | None = None
ids: Any = None
EXIT_WAIT_S = 2.0
"""How long a process waits at its end for its last spans to leave, unless
`OTEL_BSP_EXPORT_TIMEOUT` (ms) says otherwise: the SDK would wait out the exporter's retries
(10 s) for a collector that is down, and a command or a stop is not held for that."""
forced: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("muster_trace_ids", default=None)


def wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Do the standard variables ask for traces?"""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def enabled() -> bool:
    return provider is not None


def configure(service: str, exporter: Any = None, env: Mapping[str, str] = os.environ) -> bool:
    """Set tracing up for this process when the variables ask for it, or with `exporter` (the
    tests' in-memory one, spans handed over as they end). Returns whether it is on. Once per
    process: a second call changes nothing."""
    global provider, ids
    if provider is not None:
        return True
    if exporter is None and not wanted(env):
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or f"muster-{service}",
                                "service.instance.id": f"{socket.gethostname()}-{os.getpid()}"})
    made = TracerProvider(resource=resource, id_generator=_ids())
    if exporter is not None:
        made.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        for one in _exporters(env):
            made.add_span_processor(BatchSpanProcessor(one))
    provider, ids = made, made.id_generator
    return True


class TracingError(ValueError):
    """The variables ask for traces in a way muster cannot export; the message names the variable."""


PROTOCOLS = ("http/protobuf", "grpc")


def check(env: Mapping[str, str] = os.environ) -> list[tuple[str, str]]:
    """The exporters the variables ask for, as (name, OTLP protocol), without importing the SDK;
    TracingError for a name or a protocol muster does not know (a typo would otherwise export
    nothing, or somewhere else, without a word)."""
    names = [n.strip() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").lower().split(",") if n.strip()]
    variable = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" if env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") else "OTEL_EXPORTER_OTLP_PROTOCOL"
    protocol = (env.get(variable) or PROTOCOLS[0]).strip().lower()
    for name in names:
        if name not in ("otlp", "console"):
            raise TracingError(f"OTEL_TRACES_EXPORTER={name!r}: muster knows otlp, console and none")
        if name == "otlp" and protocol not in PROTOCOLS:
            raise TracingError(f"{variable}={protocol!r}: muster exports OTLP over {' or '.join(PROTOCOLS)}")
    if "otlp" in names:
        _check_files(env)
    return [(name, protocol) for name in names]


def _check_files(env: Mapping[str, str]) -> None:
    """A CA file, client certificate or key the exporter would read and cannot: the SDK says so
    only at each export, every few seconds in every process's log, and no span leaves."""
    for what in ("CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY"):
        variable = next((v for v in (f"OTEL_EXPORTER_OTLP_TRACES_{what}", f"OTEL_EXPORTER_OTLP_{what}") if env.get(v)), None)
        if variable is not None and not os.path.isfile(env[variable]):
            raise TracingError(f"{variable}={env[variable]!r}: no such file (the exporter reads it at each export)")


def describe(env: Mapping[str, str] = os.environ) -> str | None:
    """Where this process's spans go, in a few words (`muster up` says it), or None when off;
    TracingError as `check`."""
    if not wanted(env):
        return None
    said = []
    for name, protocol in check(env):
        if name == "console":
            said.append("console (stderr, a JSON line per span: a service's in its log)")
            continue
        said.append(f"OTLP {protocol} to {printable(_endpoint(env, protocol))}")
    return ", ".join(said)


def _endpoint(env: Mapping[str, str], protocol: str) -> str:
    signal = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or ("http://localhost:4317" if protocol == "grpc" else "http://localhost:4318")
    return signal or (base if protocol == "grpc" else f"{base.rstrip('/')}/v1/traces")


def _otlp(env: Mapping[str, str]) -> Iterator[tuple[str, str, urllib.parse.SplitResult]]:
    """Each OTLP exporter wanted: its protocol, endpoint, and the endpoint's parts."""
    if not wanted(env):
        return
    for name, protocol in check(env):
        if name == "otlp":
            endpoint = _endpoint(env, protocol)
            yield protocol, endpoint, urllib.parse.urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")


def in_clear(env: Mapping[str, str] = os.environ) -> str | None:
    """A warning when spans would cross the network unencrypted (an `http://` collector, or a
    gRPC one with `OTEL_EXPORTER_OTLP_INSECURE`, on another machine): their attributes name
    tenants and clusters, and the collector's key in OTEL_EXPORTER_OTLP_HEADERS travels with
    them. None when they stay on loopback or go over TLS; TracingError as `check`."""
    for protocol, endpoint, parts in _otlp(env):
        insecure = any(env.get(v, "").strip().lower() == "true"
                       for v in ("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"))
        clear = parts.scheme == "http" or (protocol == "grpc" and not parts.scheme and insecure)
        if clear and not _loopback(parts.hostname or ""):
            return (f"traces go unencrypted to {printable(endpoint)}, another machine: their spans name tenants and "
                    "clusters, and a collector key in OTEL_EXPORTER_OTLP_HEADERS goes with them; use https:// (docs/tracing.md)")
    return None


def collector_silent(env: Mapping[str, str] = os.environ, timeout: float = 0.5) -> str | None:
    """A warning when nothing takes a connection at the OTLP endpoint now (`muster up` says it at
    its start): every span would be dropped, and each command would wait for its own at its exit
    (OTEL_BSP_EXPORT_TIMEOUT). None when one does, or when spans go elsewhere (console, off)."""
    for protocol, endpoint, parts in _otlp(env):
        port = parts.port or (443 if parts.scheme == "https" else 4317 if protocol == "grpc" else 80)
        try:
            socket.create_connection((parts.hostname or "localhost", port), timeout=timeout).close()
        except OSError as err:
            return (f"nothing answers at {printable(endpoint)} now ({err.strerror or type(err).__name__}): spans are "
                    "dropped until a collector listens there, and each command waits up to OTEL_BSP_EXPORT_TIMEOUT for its "
                    "own at its exit; without a collector, OTEL_TRACES_EXPORTER=console (docs/tracing.md)")
    return None


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _exporters(env: Mapping[str, str]) -> list[Any]:
    made: list[Any] = []
    for name, protocol in check(env):
        if name == "console":
            made.append(_console())
        elif protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
            made.append(Grpc())
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
            made.append(Http(session=_keeping_the_ca()) if _ca_named() else Http())
    return made


def _console() -> Any:
    """The console exporter on stderr, one JSON line per span. On stdout (the SDK's default,
    an indented document of many lines) they were lost under `muster up`, which keeps only a
    service's stderr (its log), and mixed into a command's output (`--json` included)."""
    import sys

    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter(out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + "\n")


def _ca_named() -> bool:
    # The SDK reads these from the process's environment, not from `env`: so do we.
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE") or os.environ.get("OTEL_EXPORTER_OTLP_CERTIFICATE"))


def _keeping_the_ca() -> Any:
    """A requests session that verifies the collector with the CA file the SDK sets on it. A plain
    one lets $REQUESTS_CA_BUNDLE or $CURL_CA_BUNDLE (set system-wide in many images) override it
    at each request (psf/requests#3829): `OTEL_EXPORTER_OTLP_CERTIFICATE` was then ignored, and
    every export failed verification, retried and was dropped."""
    import requests

    class KeepingTheCa(requests.Session):
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if verify is None and isinstance(self.verify, str):
                settings["verify"] = self.verify
            return settings

    return KeepingTheCa()


def shutdown(env: Mapping[str, str] = os.environ) -> None:
    """Send what is waiting (at a process's end), for `exit_wait_s` at most: past it, the spans
    not sent yet are left to the SDK's daemon threads, which do not hold the process."""
    global provider
    if provider is not None:
        ending, provider = provider, None
        # The SDK's own wait has no bound of ours (its join is 30 s, its exporter retries for 10).
        flushing = threading.Thread(target=ending.shutdown, name="muster-trace-flush", daemon=True)
        flushing.start()
        flushing.join(exit_wait_s(env))


def exit_wait_s(env: Mapping[str, str] = os.environ) -> float:
    try:
        return max(0.0, float(env["OTEL_BSP_EXPORT_TIMEOUT"]) / 1000)
    except (KeyError, ValueError):
        return EXIT_WAIT_S


def _ids() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class Ids(RandomIdGenerator):
        """Random ids, except for a span `record` makes with ids fixed beforehand."""

        def generate_span_id(self) -> int:
            fixed = forced.get()
            return fixed[1] if fixed is not None else super().generate_span_id()

        def generate_trace_id(self) -> int:
            fixed = forced.get()
            return fixed[0] if fixed is not None else super().generate_trace_id()

    return Ids()
