"""What the people-facing commands (`muster catalog`, `muster cluster`, `muster job`) share:
where the bus is, the tenant, and errors as one sentence with an exit code, never a traceback.

Exit codes: 0 done; 1 the job ended without succeeding; 2 bad input (usage, invalid catalog,
request rejected); 3 muster could not be reached or did not answer.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click
import nats.errors
from pydantic import ValidationError

from contracts.subjects import SubjectError

from .bus.connect import CredentialsError, credentials
from .bus.eventstore import ConcurrencyError, StoreError
from .catalog_files import CatalogFileError, describe_validation_error
from .client import MusterClient, MusterError, NoAnswer, RequestRejected

T = TypeVar("T")

EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_UNREACHABLE = 3


class CliError(click.ClickException):
    """One sentence on stderr and an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_INVALID) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def bus_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--tenant, --nats-url, --data-dir."""
    f = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".muster"),
                     show_default=True, help="where `muster up` saved the NATS URL (used when NATS_URL is not set)")(f)
    f = click.option("--nats-url", "nats_server", envvar="NATS_URL", default=None, help="NATS server URL (default: $NATS_URL, "
                     "else the one `muster up` saved, else nats://127.0.0.1:4222)")(f)
    f = click.option("--tenant", envvar="MUSTER_TENANT", default="default", show_default=True, help="tenant ($MUSTER_TENANT)")(f)
    return f


def resolve_nats_url(explicit: str | None, data_dir: Path) -> str | None:
    if explicit:
        return explicit
    saved = data_dir / "nats.url"
    return saved.read_text().strip() if saved.exists() else None


async def open_client(url: str | None, tenant: str, requested_by: str | None = None) -> MusterClient:
    try:
        return await MusterClient.connect(url, connect_attempts=3, tenant=tenant, requested_by=requested_by)
    except CredentialsError as err:
        raise CliError(str(err)) from None
    except (nats.errors.NoServersError, OSError) as err:
        where = url or os.environ.get("NATS_URL") or "nats://127.0.0.1:4222"
        raise CliError(f"cannot reach NATS at {where} ({type(err).__name__}): is `muster up` running, or NATS_URL set?",
                       EXIT_UNREACHABLE) from None
    except nats.errors.Error as err:
        if "authorization violation" not in str(err).lower():
            raise
        from .auth_cli import refused_message

        raise CliError(refused_message(credentials().source)) from None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; every expected failure becomes one sentence."""
    try:
        return asyncio.run(coro)
    except click.ClickException:
        raise
    except RequestRejected as err:
        raise CliError(str(err), EXIT_INVALID) from None
    except NoAnswer as err:
        raise CliError(f"{err}: is a planner running?", EXIT_UNREACHABLE) from None
    except (CatalogFileError, SubjectError) as err:
        raise CliError(str(err), EXIT_INVALID) from None
    except ValidationError as err:
        raise CliError(f"invalid request: {describe_validation_error(err)}", EXIT_INVALID) from None
    except MusterError as err:
        raise CliError(str(err), EXIT_INVALID) from None
    except (TimeoutError, nats.errors.TimeoutError):
        raise CliError("timed out waiting for muster; the operation may still be running", EXIT_UNREACHABLE) from None
    except (StoreError, ConcurrencyError, nats.errors.Error) as err:
        raise CliError(f"the event log refused or failed: {err or type(err).__name__}", EXIT_UNREACHABLE) from None
    except KeyboardInterrupt:
        raise CliError("interrupted; an accepted operation goes on without us", 130) from None
    except Exception as err:  # a bug: still one sentence; MUSTER_DEBUG=1 shows the traceback
        if os.environ.get("MUSTER_DEBUG"):
            raise
        raise CliError(f"internal error ({type(err).__name__}: {err}); run again with MUSTER_DEBUG=1 for details",
                       EXIT_FAILED) from None


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="print JSON (one document per line) for scripts")(f)


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, sort_keys=False, default=str))


def parse_json_arg(text: str, what: str) -> Any:
    """A JSON value given inline, or `@file` to read it from a file (JSON or YAML)."""
    source = what
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise CliError(f"{what}: cannot read {path}: {err.strerror or err}") from None
        source = str(path)
        if path.suffix in (".yaml", ".yml"):
            import yaml

            try:
                return yaml.safe_load(text)
            except yaml.YAMLError as err:
                raise CliError(f"{source}: not valid YAML: {err}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise CliError(f"{source}: not valid JSON: {err}") from None


def command(f: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """An async click callback, run with `run` (errors become one sentence)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run(f(*args, **kwargs))

    return wrapper
