"""The notifier's operator settings, read at start and again on SIGHUP: its secrets file and
where webhooks may go besides public addresses (docs/governance.md, "Secrets and receivers
added while it runs").

`--secrets FILE` and `--webhook-allow-file FILE` are read again; `--webhook-allow` entries are
fixed at start. A secret or a receiver is added without a restart of the deployment: edit the
file, then `muster reload` (or `kill -HUP` the notifier).

A reload that cannot read a file keeps what the notifier had and says why in its log (the
file and the problem, never a value): a typo while it runs stops no delivery.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog

from muster.destinations import ALLOW_OPTION, Allowed, AllowError
from muster.secretsfile import load_secrets

from .adapters.delivery import Deliveries
from .domain.secrets import NotifierSecrets, SecretsFileError

log = structlog.get_logger("muster.notifier")
ALLOW_FILE_OPTION = f"{ALLOW_OPTION}-file"
ALLOW_FILE_ENV = "MUSTER_WEBHOOK_ALLOW_FILE"
ALLOW_FILE_HEADER = (
    "# Where the notifier's webhooks may go besides public addresses: [TENANT=]HOST|CIDR[:PORT] entries,\n"
    "# one or more a line (docs/governance.md, \"Where webhooks may go\"), with `muster up --webhook-allow`'s.\n"
    "# `muster reload` has the running notifier read this file (and its secrets file) again.\n")


def allow_file_entries(path: str) -> list[str]:
    """The entries of an allow file: lines, `#` starting a comment; commas or spaces between entries."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise AllowError(f"{ALLOW_FILE_OPTION} {path}: cannot read it: {err}") from None
    return [line.split("#", 1)[0] for line in text.splitlines() if line.split("#", 1)[0].strip()]


@dataclass(frozen=True)
class Settings:
    secrets_file: str | None = None
    allow: tuple[str, ...] = ()
    allow_file: str | None = None

    def secrets(self) -> NotifierSecrets:
        """Raises SecretsFileError naming the file and what is wrong with it."""
        if not self.secrets_file:
            return NotifierSecrets(given=False)
        return NotifierSecrets.of(load_secrets(self.secrets_file), f"secrets file {self.secrets_file}")

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


def reload(settings: Settings, deliveries: Deliveries) -> bool:
    """Read the settings again into `deliveries` (SIGHUP); on a problem keep what it had."""
    try:
        secrets, allowed = settings.secrets(), settings.allowed()
    except (SecretsFileError, AllowError) as err:
        log.error("notifier not reloaded", error=str(err), kept="the secrets and receivers it had")
        return False
    deliveries.reconfigure(secrets, allowed)
    log.info("notifier reloaded", secrets_file=settings.secrets_file or "", shared_secrets=len(secrets.shared),
             tenants_with_secrets=len(secrets.tenants), allowed_besides_public=str(allowed))
    return True
