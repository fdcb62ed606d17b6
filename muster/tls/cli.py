"""`muster tls issue|rotate` (docs/security.md, "TLS")."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import click

from muster.cli_support import EXIT_FAILED, EXIT_INVALID, CliError, FilePath, guarded, running_deployment
from muster.help_group import WholeHelpGroup


@click.group("tls", cls=WholeHelpGroup)
def tls() -> None:
    """Certificates: issue them from a local CA, rotate a running deployment's."""


def _spec(text: str) -> tuple[str, list[str]]:
    name, _, hosts = text.partition("=")
    if not name or "/" in name or name.startswith("."):
        raise CliError(f"{text!r}: give NAME=HOST[,HOST...] (NAME names the files, without a slash)", EXIT_INVALID)
    from .ca import host_problem

    named = [h for h in hosts.split(",") if h]
    for host in named:
        if (problem := host_problem(host)) is not None:
            raise CliError(f"{text!r}: {problem}", EXIT_INVALID)
    return name, named


@tls.command("issue")
@click.argument("specs", nargs=-1, required=True, metavar="NAME=HOST[,HOST...]...")
@click.option("--dir", "folder", type=FilePath(file_okay=False, path_type=Path), required=True,
              help="the CA's folder (ca.pem, ca.key: made when missing); certificates go to servers/ or clients/")
@click.option("--out", type=FilePath(file_okay=False, path_type=Path), default=None,
              help="where the certificates and a copy of ca.pem go (default: --dir); keeps the CA's key apart")
@click.option("--client", is_flag=True, help="client certificates (mutual TLS), not servers'")
@click.option("--renew", is_flag=True, help="new keys and certificates even where valid ones exist (rotation)")
@guarded
def issue(specs: tuple[str, ...], folder: Path, out: Path | None, client: bool, renew: bool) -> None:
    """Make (or keep) certificates signed by the CA in --dir, e.g. for compose.yaml:
    `muster tls issue --dir /ca --out /tls nats-1=nats-1,localhost tracker=tracker,localhost`."""
    from .ca import LocalCA, write_private
    from .context import TlsError

    wanted = [_spec(spec) for spec in specs]  # every name checked before a CA is made
    for name, hosts in wanted:
        if not client and not hosts:
            raise CliError(f"{name}: a server certificate needs the host names clients reach it by (NAME=HOST,...)", EXIT_INVALID)
    try:
        ca = LocalCA.load_or_create(folder)
    except TlsError as err:
        raise CliError(str(err), EXIT_INVALID) from None
    out = out or folder
    if out != folder:
        write_private(out / "ca.pem", ca.cert_path.read_bytes())
    for name, hosts in wanted:
        path = out / ("clients" if client else "servers") / name
        pair = (ca.issue if renew else ca.ensure)(path, f"muster {name}", hosts, server=not client)
        click.echo(f"{pair.cert} {pair.key}")
    click.echo(f"clients trust {out / 'ca.pem'}")


@tls.command("rotate")
@click.option("--data-dir", type=FilePath(file_okay=False, path_type=Path), default=Path(".muster"), show_default=True,
              envvar="MUSTER_DATA_DIR", help="the deployment's data directory ($MUSTER_DATA_DIR)")
@guarded
def rotate(data_dir: Path) -> None:
    """Ask the running `muster up --tls` to make new server certificates and have nats-server and
    the tracker load them, without a restart (it prints when done)."""
    state = running_deployment(data_dir, "its certificates are checked at its next start")
    pid = int(state["pid"])
    if str(state.get("tracker_url", "")).startswith("http://"):
        # Said here, not only on `muster up`'s terminal (which may be another's, or a log).
        raise CliError(f"the deployment in {data_dir} runs without TLS ({state['tracker_url']}): nothing to rotate "
                       "(`muster up --tls` makes and rotates certificates)", EXIT_INVALID)
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as err:
        raise CliError(f"cannot reach the deployment in {data_dir}: {err}", EXIT_FAILED) from None
    click.echo(f"asked `muster up` (pid {pid}) to rotate the server certificates; it says when it has")
