"""The notifier's operator settings, read at start and again on SIGHUP: its secrets file and
where webhooks may go besides public addresses (docs/governance.md, "Secrets and receivers
added while it runs").

`--secrets FILE` and `--webhook-allow-file FILE` are read again; `--webhook-allow` entries are
fixed at start. A secret or a receiver is added without a restart of the deployment: edit the
file, then `muster reload` (or `kill -HUP` the notifier).

A reload that cannot read a file keeps what the notifier had and says why in its log (the
file and the problem, never a value): a typo while it runs stops no delivery. The allow file is
read as the pool service and the planners read theirs (muster/allowfile.py); the secrets file is
the notifier's alone, and is read with it, all or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from muster.allowfile import AllowSettings
from muster.destinations import Allowed, AllowError
from muster.secretsfile import load_secrets

from .adapters.delivery import Deliveries
from .domain.secrets import NotifierSecrets, SecretsFileError

log = structlog.get_logger("muster.notifier")


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
        """Raises AllowError naming the entry (and the file it is in): muster/allowfile.py's, as
        the pool service and the planners read theirs."""
        return AllowSettings(self.allow, self.allow_file).allowed()


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
