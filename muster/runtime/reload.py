"""`muster reload`: the running `muster up` has its notifiers read their secrets file and allow
file again, and its pool service and planners their allow file, without a restart
(docs/governance.md, "Secrets and receivers added while it runs").

`muster up` gives the notifier files in its data directory unless the operator names others:
`notifier-secrets.json` (`{}` at first; $MUSTER_NOTIFIER_SECRETS names another) and
`webhook-allow` (comments at first; $MUSTER_WEBHOOK_ALLOW_FILE names another), which the pool
service and the planners read too, for the callbacks of requests. Add a secret or a receiver
there, run `muster reload`: `muster up` sends each of them a SIGHUP (as `muster tls rotate` has
the trackers reload certificates) and says what each did.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import click

from muster.allowfile import ALLOW_FILE_ENV, ALLOW_FILE_HEADER, ALLOW_FILE_OPTION
from muster.cli_support import EXIT_FAILED, CliError, FilePath, guarded, running_deployment

SECRETS_ENV = "MUSTER_NOTIFIER_SECRETS"
RELOAD_SIGNAL = signal.SIGUSR2
"""What `muster reload` sends `muster up` (SIGUSR1 rotates certificates; SIGHUP stops it: a closed terminal)."""


def notifier_files(data_dir: Path, env: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    """The notifier's arguments for its files: the operator's (by their variables, which the
    notifier reads itself) or the data directory's, made when missing (0600)."""
    secrets = [] if env.get(SECRETS_ENV) else ["--secrets", str(_made(data_dir, "notifier-secrets.json", "{}\n"))]
    return secrets + allow_file_args(data_dir, env)


def allow_file_args(data_dir: Path, env: dict[str, str] | os._Environ[str] = os.environ) -> list[str]:
    """The allow file of the notifier, the pool service and the planners (one setting, as
    `--webhook-allow` is): the operator's ($MUSTER_WEBHOOK_ALLOW_FILE, which each reads itself)
    or the data directory's `webhook-allow`, made when missing (0600)."""
    return [] if env.get(ALLOW_FILE_ENV) else [ALLOW_FILE_OPTION, str(_made(data_dir, "webhook-allow", ALLOW_FILE_HEADER))]


def _made(data_dir: Path, name: str, first: str) -> Path:
    path = data_dir.resolve() / name
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(first)
    return path


@click.command("reload")
@click.option("--data-dir", type=FilePath(file_okay=False, path_type=Path), default=Path(".muster"), show_default=True,
              envvar="MUSTER_DATA_DIR", help="the deployment's data directory ($MUSTER_DATA_DIR)")
@guarded
def reload(data_dir: Path) -> None:
    """Have the running `muster up` make its notifiers read their secrets file and webhook allow
    file again, and its pool service and planners the allow file (SIGHUP), without a restart (it
    prints what each did); one of them given up on (a file it could not read) starts again."""
    state = running_deployment(data_dir, "its services read their files at its next start")
    pid = int(state["pid"])
    try:
        os.kill(pid, RELOAD_SIGNAL)
    except OSError as err:
        raise CliError(f"cannot reach the deployment in {data_dir}: {err}", EXIT_FAILED) from None
    click.echo(f"asked `muster up` (pid {pid}) to have its notifiers, pool service and planners read their files again; "
               "it says when they have")
