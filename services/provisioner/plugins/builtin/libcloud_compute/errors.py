"""What a libcloud call's failure means, in one sentence a task's error can carry.

Libcloud passes on what the HTTP stack raised: a refused connection arrives as requests'
`ConnectionError(MaxRetryError('HTTPConnectionPool(host=..., port=...): Max retries exceeded with
url: /?Action=... (Caused by NewConnectionError(...: [Errno 111] Connection refused))'))`, which
says where and why only at its bottom; a cloud that refuses the credentials arrives as
`InvalidCredsError`, whose text does not say which credentials. Both are turned into words here."""

from __future__ import annotations

from typing import Any


class CloudError(Exception):
    """What the cloud refused, in words fit for a task's error."""


class CloudUnreachable(CloudError):
    """The endpoint did not answer: nothing about the request is known (not even whether the
    cloud did it), so no other call is tried in its place."""


class CredentialsRefused(CloudError):
    """The cloud said who we claim to be is wrong: no other call can do better."""


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
    return CloudError(f"{what}: {type(err).__name__}: {err}")
