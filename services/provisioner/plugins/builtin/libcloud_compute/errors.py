"""What a libcloud call's failure means, in one sentence a task's error can carry.

Libcloud passes on what the HTTP stack raised: a refused connection arrives as requests'
`ConnectionError(MaxRetryError('HTTPConnectionPool(host=..., port=...): Max retries exceeded with
url: /?Action=... (Caused by NewConnectionError(...: [Errno 111] Connection refused))'))`, which
says where and why only at its bottom; a cloud that refuses the credentials arrives as
`InvalidCredsError`, whose text does not say which credentials. Both are turned into words here,
and each says whether a retry could succeed (`permanent`): the provider's outcome carries it, and
the planner does not retry what cannot succeed."""

from __future__ import annotations

import re
from typing import Any


class CloudError(Exception):
    """What the cloud refused, in words fit for a task's error. Retried unless `permanent`: an
    error of the cloud's own (its capacity, a throttle, a 5xx) may pass."""

    permanent = False


class CloudUnreachable(CloudError):
    """The endpoint did not answer: nothing about the request is known (not even whether the
    cloud did it), so no other call is tried in its place. It may answer on a retry."""


class CloudRefused(CloudError):
    """The request is wrong as it stands (no such image or size, parameters the driver or the
    cloud refuses, a driver or credentials the provider lacks): the same request fails the same
    way until the catalog or the secrets change, so it is not retried."""

    permanent = True


class CredentialsRefused(CloudRefused):
    """The cloud said who we claim to be is wrong: no other call can do better."""


REFUSED_STATUSES = frozenset({400, 401, 403, 404})
"""HTTP answers that refuse the request itself (malformed, unknown parameter, unauthorized, no
such resource). Not 408, 409 or 429 (a timeout, a conflict of the moment, a throttle) nor 5xx:
those may pass. A refusal whose code says the resource is busy may pass too (PASSING_CODES)."""

PASSING_CODES = frozenset({
    # A resource in a state it is leaving (pending, stopping, attaching, detaching).
    "IncorrectInstanceState", "IncorrectState", "IncorrectSpotRequestState", "InvalidStateTransition",
    # Something still holds it: a volume attached, an interface or address being released, a
    # group or subnet whose machines are terminating.
    "DependencyViolation", "VolumeInUse",
    # Eventual consistency: the provider names only machines the cloud itself listed or made,
    # and EC2 may not know one yet (or any more) in the instant after.
    "InvalidInstanceID.NotFound",
    # Throttles and quotas others' deletes free, the account's sign-up still in progress, tags
    # written by two requests at once.
    "RequestLimitExceeded", "Throttling", "InstanceLimitExceeded", "VcpuLimitExceeded",
    "PendingVerification", "ConcurrentTagAccess",
})
"""EC2 error codes sent with HTTP 400 for a state of the moment, which a retry may find changed
(AWS's "Error codes for the Amazon EC2 API"). Any code ending `.InUse` (an address, a group, a
snapshot held by something else) and any `Insufficient...Capacity` are read so too."""

_CODE = re.compile(r"^([A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)*): ")
"""libcloud's EC2 error text: `Code: message`, one line per error."""


def cloud_codes(err: BaseException) -> list[str]:
    """The error codes (EC2's `Code: message` lines) a driver's error carries."""
    text = str(getattr(err, "message", None) or err)
    return [m.group(1) for line in text.splitlines() if (m := _CODE.match(line.strip()))]


def passing(code: str) -> bool:
    """The code names a state of the moment (PASSING_CODES)."""
    return code in PASSING_CODES or code.endswith(".InUse") or (code.startswith("Insufficient") and code.endswith("Capacity"))


def _causes(err: BaseException) -> list[BaseException]:
    """The error and what it wraps: requests and urllib3 nest the socket's error in `args`,
    `reason` or the exception chain."""
    out: list[BaseException] = []
    todo: list[Any] = [err]
    while todo and len(out) < 16:
        e = todo.pop(0)
        if not isinstance(e, BaseException) or any(e is seen for seen in out):
            continue
        out.append(e)
        todo += [getattr(e, "reason", None), e.__cause__, e.__context__, *getattr(e, "args", ())]
    return out


def unreachable_reason(err: BaseException) -> str | None:
    """Why the endpoint could not be reached ('Connection refused', 'timed out'), or None when
    the error is not a connection's."""
    causes = _causes(err)
    kinds = {f"{type(e).__module__}.{type(e).__name__}" for e in causes}
    if not any(k.startswith(("requests.exceptions.", "urllib3.exceptions.")) for k in kinds) \
            and not any(isinstance(e, (ConnectionError, TimeoutError)) for e in causes):
        return None
    for e in causes:
        if isinstance(e, OSError) and e.strerror:
            return str(e.strerror)
    for e in causes:
        if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
            return "no answer in time"
    dropped = [e for e in causes if isinstance(e, ConnectionError) and str(e)]  # http.client's RemoteDisconnected
    return str(dropped[-1]) if dropped else None


def endpoint_of(fn: Any) -> str:
    """host:port of the driver a bound driver method belongs to, or ''."""
    conn = getattr(getattr(fn, "__self__", None), "connection", None)
    host, port = getattr(conn, "host", None), getattr(conn, "port", None)
    return f"{host}:{port}" if host else ""


def http_status(err: BaseException) -> int | None:
    """The HTTP status a libcloud error carries (`BaseHTTPError.code`, `ProviderError.http_code`)."""
    from libcloud.common.exceptions import BaseHTTPError  # loaded already: a driver raised this
    from libcloud.common.types import ProviderError

    code = err.code if isinstance(err, BaseHTTPError) else err.http_code if isinstance(err, ProviderError) else None
    try:
        return int(code) if code is not None else None
    except (TypeError, ValueError):
        return None


EXCERPT_CHARS = 200
"""Of a body the driver could not read: enough to tell an HTML error page or a proxy's answer
from the cloud's own."""
_SECRETISH = re.compile(r"(?i)\b(authorization|x-amz-signature|signature|x-amz-credential|credential|x-amz-security-token|"
                        r"\w*token|password|secret\w*|api_?key)(\s*[=:]\s*\"?|\"\s*:\s*\")"
                        r"((?:bearer|basic|aws4-hmac-sha256)\s+)?([^\s&\"',<]+)")
"""What a body echoing the request could hold that is not a provider's secret field (those the
registry masks in every error): a signature, a session token, an Authorization header."""


def excerpt(body: Any) -> str:
    """A body's start, on one line, bounded, a credential-looking value in it masked."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    text = " ".join(text.split())
    text = _SECRETISH.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}***", text)
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS - 1] + "…"


def _driver_name(driver: Any) -> str:
    """A driver (or its class, as some raise it) by its name (`Amazon EC2`), never its repr."""
    name = getattr(driver, "name", None)
    if isinstance(name, str) and name:
        return name
    return (driver if isinstance(driver, type) else type(driver)).__name__ if driver is not None else ""


def described(err: BaseException, status: int | None = None) -> str:
    """A driver's error in words: libcloud's own errors print as their repr (`<MalformedResponseException
    in <libcloud.compute.drivers.ec2.EC2NodeDriver object at 0x7f...> 'Failed to parse XML'>: '...'`,
    a `ProviderError` as its quoted value); said here as what went wrong, the driver by name,
    the HTTP status and the start of a body it could not read."""
    from libcloud.common.types import LibcloudError, MalformedResponseError  # loaded already: a driver raised this

    if isinstance(err, MalformedResponseError):
        driver = _driver_name(err.driver)
        body = f"; it began: {excerpt(err.body)!r}" if err.body else "; it was empty"
        return (f"the cloud's answer is not what libcloud's {driver + ' ' if driver else ''}driver reads ({err.value}){body} (an error page "
                "of a proxy or gateway, or an endpoint of another API?)")
    if isinstance(err, LibcloudError):
        value = excerpt(err.value) if err.value not in (None, "") else "no message"
        code = f"HTTP {status}: " if status is not None else ""
        driver = _driver_name(err.driver)
        return f"{code}{value}" + (f" ({driver})" if driver else "")
    return str(err).strip() or (f"HTTP {status}" if status is not None else "no message")


def translate(what: str, fn: Any, err: Exception, provider: str) -> CloudError:
    """The CloudError a driver's exception means."""
    from libcloud.common.types import InvalidCredsError  # loaded already: a driver raised this

    if isinstance(err, InvalidCredsError):
        said = getattr(err, "value", None) or str(err)
        return CredentialsRefused(f"the cloud refused the credentials of provider {provider!r} ({what}: {said}): "
                                  f"check its entry in the provisioners' secrets file (docs/secrets.md)")
    reason = unreachable_reason(err)
    if reason is not None:
        where = endpoint_of(fn)
        return CloudUnreachable(f"{what}: cannot reach the cloud{' at ' + where if where else ''}: {reason}")
    status = http_status(err)
    said = f"{what}: {type(err).__name__}: {described(err, status)}"
    # A TypeError: the driver does not take these arguments, and the same call fails the same way.
    refused = status in REFUSED_STATUSES or isinstance(err, TypeError)
    if refused and any(passing(code) for code in cloud_codes(err)):
        return CloudError(f"{said} (a state of the moment: retried)")
    return CloudRefused(said) if refused else CloudError(said)
