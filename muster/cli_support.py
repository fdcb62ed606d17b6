"""The one front end of the `muster` commands: one error type, one table of exit codes, and
errors as one sentence on stderr, never a traceback (docs/client.md, "Exit codes").

Every command, operator or operation, with or without the bus, reports through `CliError`.
Expected failures of other layers (a rejected request, an unreachable server, a bad file...)
become a CliError in `as_cli_error`: the generic ones here, the bus's in `muster.cli_bus`,
each registered with `translates`. Importing this module does not import NATS, so the
commands that need no bus (`muster solve`, `muster plan`, `muster catalog validate`) stay fast.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import IO, Any, TypeVar

import click
from pydantic import ValidationError

from contracts.errors import describe_validation_error
from contracts.limits import NotJson, strict_json

from . import durations

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_UNREACHABLE = 3
EXIT_DENIED = 4
EXIT_INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done (with `--wait` or `watch`: the job succeeded)",
    EXIT_FAILED: "the job ended without succeeding (failed, rolled back, needs attention), or an internal error",
    EXIT_INVALID: "bad input: usage, an invalid file or catalog, a rejected request, an unknown job, cluster or provisioner, "
                  "a data directory another deployment holds or a port in use (`muster up`, `muster tracker`)",
    EXIT_UNREACHABLE: "muster could not be reached, or did not answer or finish in time (`--timeout`)",
    EXIT_DENIED: "refused: the token is not accepted, or its principal lacks a permission (the message names it and its scope)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); an accepted operation goes on without us (`events --follow` and `watch` end so, saying nothing)",
}
"""The table docs/client.md shows (a unit test keeps the two the same)."""

def new_token(principal: str | None, reason: str = "") -> str:
    """The way on from a refused token, wherever it is refused (`whoami`, any read through the
    tracker), for the principal the token names (`PRINCIPAL` when it names none). A principal
    the `reason` says is disabled gets no token again (`muster user disable` is for good)."""
    who = principal if principal and principal != "anonymous" else "PRINCIPAL"
    if principal and f"{principal} is disabled" in reason:
        return (f"{principal} is disabled for good (its id stays taken): an admin of your tenant makes you a new principal, "
                "`muster user create NEW-ID --save FILE`, and gives you FILE; use it with MUSTER_CREDENTIALS=FILE")
    return (f"a new token: an admin of your tenant runs `muster token create --for {who} --save FILE` and gives you "
            "FILE; use it with MUSTER_CREDENTIALS=FILE (or its token in MUSTER_TOKEN)")


def credentials_failed(err: Exception) -> CliError:
    """A credentials source that cannot be used: a token that is no token is refused as an unknown
    one is (exit 4, and the way to a new one); a file that cannot be read is bad input (exit 2)."""
    from .bus.connect import TokenUnusable

    if isinstance(err, TokenUnusable):
        return CliError(f"{err}\n{new_token(None)}", EXIT_DENIED)
    return CliError(str(err), EXIT_INVALID)


ERROR_KINDS: dict[int, str] = {EXIT_FAILED: "failed", EXIT_INVALID: "invalid", EXIT_UNREACHABLE: "unreachable",
                               EXIT_DENIED: "denied", EXIT_INTERRUPTED: "interrupted"}
"""The `kind` of a `--json` command's error document, by its exit code (docs/client.md)."""
JSON_ASKED = "muster.json"
"""The key in click's context `meta` (shared by a command's contexts) set when `--json` is given."""
JSON_PRINTED = "muster.json.printed"
"""Set when the command printed a JSON document (`echo_json`): its answer, which says a failure
that follows (a `Rejected` reply, a diff's problems, the event that ended a followed job)."""


class CliError(click.ClickException):
    """One sentence on stderr and an exit code. With a `document`, the document is printed on
    stdout as JSON (`muster solve` and `muster plan` answer scripts that way), and the sentence
    on stderr too when stdout is not a terminal: `muster solve ... > layout.json` put the error
    in the file and showed the person nothing.

    A command given `--json` (`json_option`) that printed no JSON document yet says the error
    as one, `{"error": {"kind", "message", "exit_code", "field"}}` (`field`: the request's field
    at fault, when the refusal names one); one that did (its answer says the failure: a
    `Rejected` reply, a diff's problems, the event that ended a followed job), or that has a
    `document` of its own (a governance refusal's answer; `muster solve` and `muster plan`'s
    `{"error": {"kind", "message"}}`), adds none. Before session 37 only those two answered
    scripts so: a refused `cluster show --json` printed its sentence on stderr
    alone. An exit with nothing to say (`stop`) prints none."""

    def __init__(self, message: str, exit_code: int = EXIT_INVALID, document: Any = None, field: str | None = None) -> None:
        super().__init__(message)
        # click declares `exit_code` a class variable; every CliError carries its own code.
        self.exit_code = exit_code  # type: ignore[misc]
        self.document = document
        self.field = field
        ctx = click.get_current_context(silent=True)  # (made while the command runs, its options parsed)
        self.as_json = bool(ctx is not None and ctx.meta.get(JSON_ASKED) and not ctx.meta.get(JSON_PRINTED))

    def error_document(self) -> dict[str, Any]:
        return {"error": {"kind": ERROR_KINDS.get(self.exit_code, "failed"), "message": self.message,
                          "exit_code": self.exit_code, "field": self.field}}

    def show(self, file: IO[Any] | None = None) -> None:
        document = self.document
        if document is None and self.as_json and self.message:
            document = self.error_document()
        if document is not None:
            click.echo(json.dumps(document))
            if self.message and not sys.stdout.isatty():
                super().show(file)
        elif self.message:
            super().show(file)


def stop(code: int) -> CliError:
    """An exit with `code` and nothing more to say (what happened was printed already)."""
    return CliError("", code)


Translator = Callable[[BaseException], "CliError | None"]
_translators: list[Translator] = []


def translates(f: Translator) -> Translator:
    """Register how some layer's expected errors read as a CliError (None: not one of mine)."""
    _translators.append(f)
    return f


def as_cli_error(err: BaseException) -> CliError:
    if isinstance(err, CliError):
        return err
    for translate in _translators:
        found = translate(err)
        if found is not None:
            return found
    if isinstance(err, ValidationError):
        return CliError(f"invalid request: {describe_validation_error(err)}", EXIT_INVALID)
    if isinstance(err, KeyboardInterrupt):
        return CliError("interrupted (what muster accepted goes on without us)", EXIT_INTERRUPTED)
    return CliError(f"internal error ({type(err).__name__}: {err}); run again with MUSTER_DEBUG=1 for details", EXIT_FAILED)


def _reported(err: BaseException) -> CliError:
    if isinstance(err, click.ClickException | click.exceptions.Exit | click.exceptions.Abort):
        raise err
    if os.environ.get("MUSTER_DEBUG") and not isinstance(err, CliError | KeyboardInterrupt):
        raise err  # a bug, asked to be shown
    return as_cli_error(err)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; every failure becomes one sentence and an exit code."""
    try:
        return asyncio.run(coro)
    except BrokenPipeError:
        raise _reader_gone() from None
    except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - every failure becomes one sentence (_reported)
        raise _reported(err) from None


def _reader_gone() -> click.exceptions.Exit:
    """Whoever read our output stopped (`muster events | head`): a normal end, said nowhere.
    stdout is pointed at /dev/null so that the interpreter's last flush finds no closed pipe."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return click.exceptions.Exit(EXIT_OK)


def command(f: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """An async click callback, run with `run`."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run(f(*args, **kwargs))

    return wrapper


def following(f: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """An async click callback that follows until the user stops it (`events --follow`,
    `watch`): Ctrl-C is how it ends, as `tail -f`'s does, so it exits 130 saying nothing (it
    said "Error: interrupted ..."; nothing it follows is changed by stopping)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return run(f(*args, **kwargs))
        except CliError as err:
            if err.exit_code == EXIT_INTERRUPTED:
                raise stop(EXIT_INTERRUPTED) from None
            raise

    return wrapper


def guarded(f: Callable[..., T]) -> Callable[..., T]:
    """A plain click callback whose failures are reported like `run`'s."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return f(*args, **kwargs)
        except BrokenPipeError:
            raise _reader_gone() from None
        except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - as in run()
            raise _reported(err) from None

    return wrapper


class Duration(click.ParamType[float]):
    """A time an option waits, as people type it (`30`, `90s`, `10m`, `2h`), in seconds, within
    [`least`, `most`]: `--timeout 10m` was "'10m' is not a valid float range" (click's words)."""

    name = "duration"

    def __init__(self, least: float = 0.1, most: float | None = None) -> None:
        self.least, self.most = least, most

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            found: float | None = float(value)  # (a default)
        else:
            found = durations.parsed(str(value))
            if found is None:
                self.fail(f"{str(value)[:40]!r} is not a duration ({durations.EXAMPLES})", param, ctx)
        assert found is not None
        if found < self.least or (self.most is not None and found > self.most):
            most = f" and at most {durations.spoken(self.most)}" if self.most is not None else ""
            self.fail(f"{str(value)[:40]!r} is out of range: give at least {durations.spoken(self.least)}{most}", param, ctx)
        return found


class WholeNumber(click.IntRange):
    """A count, a port, a priority: a whole number within [`least`, `most`] (either open), said
    in muster's words as `Duration` is: `-n abc` was "'abc' is not a valid integer range" and
    `-n 0` "0 is not in the range x>=1" (click's). The range still shows in `--help`."""

    name = "integer"

    def __init__(self, least: int | None = None, most: int | None = None) -> None:
        super().__init__(min=least, max=most)

    def wants(self) -> str:
        bounds = [f"at least {self.min}" if self.min is not None else "", f"at most {self.max}" if self.max is not None else ""]
        return " and ".join(b for b in bounds if b)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        wants = self.wants()
        if isinstance(value, int) and not isinstance(value, bool):
            number = value  # (a default)
        else:
            text = str(value).strip()
            if not re.fullmatch(r"[+-]?[0-9]+", text):
                self.fail(f"{str(value)[:40]!r} is not a whole number{': give ' + wants if wants else ''}", param, ctx)
            if len(text.lstrip("+-0")) > 18:  # (int() of 5,000 digits raises; no option wants one)
                # The bound it passes, not the other one: 10**40 read "out of range: give at least 1".
                passed = self.min if text.startswith("-") else self.max
                bound = f"give {'at least' if text.startswith('-') else 'at most'} {passed}" if passed is not None else ""
                self.fail(f"{text[:40] + ('…' if len(text) > 40 else '')!r} is out of range: {bound or 'over 18 digits'}", param, ctx)
            number = int(text)
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            self.fail(f"{str(value)[:40]!r} is out of range: give {wants}", param, ctx)
        return number


class NodeCount(WholeNumber):
    """A count of nodes (`--nodes`, `--add`, `--remove`): one past muster's limit on a cluster's
    size is said in that limit's one sentence (`contracts.commands.too_many_nodes`, as the
    request's own check says it of 10,001), however many digits it has: 10**40 read "out of
    range: give at least 1", naming no limit."""

    def __init__(self) -> None:
        super().__init__(1)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from contracts.commands import MAX_CLUSTER_SIZE, too_many_nodes

        digits = str(value).strip().removeprefix("+").lstrip("0")
        if re.fullmatch(r"[0-9]+", digits) and (len(digits) > 18 or int(digits) > MAX_CLUSTER_SIZE):
            self.fail(too_many_nodes(f"{int(digits):,}" if len(digits) <= 18 else f"a number of {len(digits):,} digits"), param, ctx)
        return super().convert(value, param, ctx)


NAME_MAX, PATH_MAX = 255, 4096
"""Linux's limits on a file name and a path, in bytes."""


def path_problem(text: str) -> str | None:
    """What makes `text` no path a file system takes, before it is opened (open() raised
    ValueError on a NUL, OSError 'File name too long' came out as an internal error, and an
    empty path was the current folder)."""
    if not text:
        return "is empty: give a path"
    if "\x00" in text:
        return "has a NUL character: no path has one"
    longest = max(len(part.encode("utf-8", "surrogateescape")) for part in text.split("/"))
    if longest > NAME_MAX or len(text.encode("utf-8", "surrogateescape")) > PATH_MAX:
        return f"is too long for a path (a name takes at most {NAME_MAX} bytes, a path {PATH_MAX})"
    return None


class FilePath(click.Path):
    """click's Path, refusing what no file system takes (`path_problem`) naming the option."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and (problem := path_problem(value)) is not None:
            self.fail(f"{value[:40] + ('…' if len(value) > 40 else '')!r} {problem}", param, ctx)
        return super().convert(value, param, ctx)


def _json_asked(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
    if value:  # a failure then ends stdout with its error document (`CliError`)
        ctx.meta[JSON_ASKED] = True
    return value


def json_flag(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--json` (as `as_json`), with its own help line."""
    return click.option("--json", "as_json", is_flag=True, callback=_json_asked, help=help)


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return json_flag("print JSON (one document per line) for scripts")(f)


def echo_json(value: Any) -> None:
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # a failure after it is said by it (`CliError`)
        ctx.meta[JSON_PRINTED] = True
    click.echo(json.dumps(value, sort_keys=False, default=str))


def parse_json_arg(text: str, what: str) -> Any:
    """A JSON value given inline, or `@file` to read it from a file (JSON or YAML: by its name, else
    JSON, else YAML of a mapping or a list; a config saved as `nats.yaml.bad` was refused as `not
    valid JSON`)."""
    source = what
    if text.startswith("@"):
        path = Path(text[1:])
        if (problem := path_problem(text[1:])) is not None:
            raise CliError(f"{what}: {text[1:41]!r} {problem}")
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
        return strict_json(text)  # (NaN would reach the planner, refused there as the request body's)
    except NotJson as err:
        raise CliError(f"{source} {err.said()}") from None
    except json.JSONDecodeError as err:
        if source != what:  # a file of another name (`@/tmp/redis.conf.yaml.bad`, `@config.txt`) may be YAML
            import yaml

            try:
                read = yaml.safe_load(text)
            except yaml.YAMLError:
                read = None
            if isinstance(read, dict | list):
                return read
        raise CliError(f"{source}: not valid JSON: {err}"
                       + (" (nor YAML of a mapping or a list; a file ending .yaml or .yml is read as YAML alone)" if source != what else "")
                       ) from None


UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def job_id_of(value: str | None, command: str = "") -> str:
    """A JOB_ID argument, checked here: every job command says the same of a mistyped one, at
    once (`status` said "not valid", `job cancel` sent it and was told "unknown job"), and of a
    missing one where the jobs are listed (click's bare "Missing argument 'JOB_ID'"; `command`:
    the command as typed, `muster job cancel`)."""
    if not value:
        raise CliError(f"{command or 'muster'} JOB_ID: which job? `muster job list` lists the tenant's jobs "
                       "(`--state running`), `muster cluster list` each cluster's last one", EXIT_INVALID)
    if not UUID_RE.fullmatch(value.strip()):
        said = f"job {value[:80]!r} is not a job id (a UUID: `muster job list` lists them)"
        if _NAMEISH.fullmatch(value.strip()) and not _HEXISH.fullmatch(value.strip()):
            # `muster status web`: a cluster's name where its job goes (a walk's first guess);
            # `muster history web` has the cluster's own story to offer
            said += (f"; if {value.strip()!r} is a cluster: `muster history --cluster {value.strip()}` tells its story"
                     if command == "muster history" else
                     f"; if {value.strip()!r} is a cluster: `muster job list --cluster {value.strip()}` lists its jobs")
        raise CliError(said)
    return value.strip().lower()


_NAMEISH = re.compile(r"[A-Za-z0-9_\-]{1,128}")
"""A cluster name's shape (contracts: 1-128 letters, digits, '-' and '_')."""
_HEXISH = re.compile(r"[0-9a-fA-F\-]+")
"""A job id cut short or mistyped, not a name."""


def running_deployment(data_dir: Path, absent: str) -> dict[str, Any]:
    """What the `muster up` running in `data_dir` says of itself (its pid, its URLs), for a
    command that signals it (`muster reload`, `muster tls rotate`); `absent` finishes the
    refusal when nothing runs there (what happens to the change instead)."""
    from muster.bus.server import DataDirLock

    if not data_dir.is_dir():
        raise CliError(f"no data directory {data_dir}: pass --data-dir (or set $MUSTER_DATA_DIR)", EXIT_INVALID)
    if not DataDirLock(data_dir).in_use():
        raise CliError(f"no muster deployment runs in {data_dir}: {absent}", EXIT_INVALID)
    try:
        state = json.loads((data_dir / DataDirLock.STATE).read_text())
        int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CliError(f"cannot reach the deployment in {data_dir}: {err}", EXIT_FAILED) from None
    return dict(state)
