"""Cross-site request forgery (docs/decisions/0017-http-writes.md).

Every form the console renders carries a token derived from the session: the HMAC-SHA256 of a
fixed label and the viewer's tenant, keyed with the session's bearer token, which only the
browser (in an HttpOnly cookie) and the tracker hold. Any tracker checks it without state or shared key, and it changes
with the token (sign-in again, a rotated token). Posts are checked for it and for a same-origin
`Origin`; the cookies are `SameSite=Strict` too. Without authorization (no session token) the
key is random per tracker process: a restarted tracker asks for the form again.

A write to the API authenticated by that cookie rather than an `Authorization` header (a script
on the console's page) sends the token as the `X-CSRF-Token` header.

The same key seals what a form's redirect says on the job page (`?said=...&seal=...`): the page
shows a `said` only under its seal, so a link someone else made (`?said=approved`) shows nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

FIELD = "csrf"
HEADER = "X-CSRF-Token"
LABEL = b"muster-console-csrf-v1"
SAID_LABEL = b"muster-console-said-v1"
_PROCESS_KEY = os.urandom(32)


def _mac(session: str | None, label: bytes) -> str:
    key = session.encode() if session else _PROCESS_KEY
    return base64.urlsafe_b64encode(hmac.new(key, label, hashlib.sha256).digest()).decode().rstrip("=")


def token_for(session: str | None, tenant: str) -> str:
    return _mac(session, LABEL + b":" + tenant.encode())


def valid(session: str | None, tenant: str, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(token_for(session, tenant), str(presented))


def seal(session: str | None, tenant: str, job_id: str, said: str) -> str:
    """Bound to the session, the tenant and the job: a seal made in another browser, or for
    another job, does not open this one's page."""
    return _mac(session, b"\0".join((SAID_LABEL, tenant.encode(), job_id.encode(), said.encode())))


def sealed(session: str | None, tenant: str, job_id: str, said: str, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(seal(session, tenant, job_id, said), str(presented))
