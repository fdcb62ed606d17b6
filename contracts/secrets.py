"""What counts as a secret in anything muster stores (catalog entities, operation requests), and
how a payload refers to one instead of carrying it (docs/secrets.md).

The log keeps everything in clear, forever, so a secret must never reach it: a value is a secret
when the name it sits under, or the name of any map or list above it, is a well-known secret
name (password, secret, token, key, credential, ssh_key, private, auth...), at any depth; or
when it holds a PEM private key, under any name. Such a value is refused, unless it is a
reference, `secret://<name>`, to a secret a provisioner keeps in its secrets file (under
`@secrets`) and resolves on the worker, just before the plugin runs.

Pure (stdlib only): the planner checks requests with it, `muster catalog apply` entities.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

REFERENCE = re.compile(r"secret://([A-Za-z0-9_\-.]{1,128})")
"""A reference to a named secret (the whole value, nothing around it)."""
NAMED = "@secrets"
"""The entry of a provisioner's secrets file that holds named secrets (no provider can be
called that: provider names are letters, digits, `-` and `_`)."""
HINT = ('give it as a reference, "secret://<name>", to a secret in the provisioners\' secrets file '
        "(docs/secrets.md)")

_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
SECRET_WORDS = frozenset({
    "password", "passwords", "passwd", "passphrase", "pass", "pwd", "secret", "secrets", "token", "tokens",
    "credential", "credentials", "cred", "creds", "private", "privatekey", "apikey", "sshkey", "auth",
    "authorization", "bearer", "cookie",
})
"""A name with one of these words is a secret's name (`db_password`, `apiToken`, `ssh-auth`)."""
KEY_WORDS = frozenset({"key", "keys"})
KEY_QUALIFIERS = frozenset({"ssh", "private", "api", "access", "secret", "signing", "encryption", "master", "client",
                            "shared", "license", "app", "service", "account", "root", "admin"})
"""`key` alone, or with one of these words (`ssh_key`, `access_key`), names a secret; a
`key_serializer` or a `primary_key` does not."""


def words(name: str) -> list[str]:
    """`dbPassword` -> ["db", "password"]; `SSH-Key` -> ["ssh", "key"]."""
    return [w.lower() for w in _WORD.findall(name)]


ABOUT_WORDS = frozenset({"url", "uri", "endpoint", "version", "type", "method", "mode"})
"""A name ending in one of these says where or what kind a secret is, not the secret itself
(`auth_url`, `ex_force_auth_version`, `token_type`): libcloud's OpenStack driver arguments are
named so, and a catalog carrying them was refused, or shown masked."""


def secret_name(name: str) -> bool:
    found = words(name)
    if found and found[-1] in ABOUT_WORDS:
        return False
    ws = set(found)
    if ws & SECRET_WORDS:
        return True
    if ws & KEY_WORDS:
        return ws <= KEY_WORDS or bool(ws & KEY_QUALIFIERS)
    return name.lower().endswith(("password", "passwd", "secret", "token", "apikey", "privatekey"))


def is_reference(value: Any) -> bool:
    return isinstance(value, str) and REFERENCE.fullmatch(value) is not None


def holds_private_key(value: Any) -> bool:
    return isinstance(value, str) and _PRIVATE_KEY.search(value) is not None


def _walk(value: Any, path: str, under_secret: bool, names: Collection[str] = ()) -> Iterator[tuple[str, Any, bool]]:
    """(path, leaf, whether a secret name is on its path) for every leaf; no recursion. The maps
    at `names` (paths) are keyed by what someone named (a provider, a service): their keys are
    not field names, so a provider called `github-auth` makes nothing under it a secret."""
    stack = [(path, value, under_secret)]
    while stack:
        where, v, secret = stack.pop()
        if isinstance(v, Mapping):
            named = where in names
            for k, item in v.items():
                stack.append((f"{where}.{k}" if where else str(k), item, secret or (not named and secret_name(str(k)))))
        elif isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                stack.append((f"{where}[{i}]", item, secret))
        elif isinstance(v, str) and v[:1] in ("{", "[") and (inner := _json(v)) is not None:
            stack.append((where, inner, secret))  # a map given as a JSON string (a shell `env`)
        else:
            yield where, v, secret


def _json(text: str) -> Any:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def secrets_in_clear(value: Any, path: str = "", under_secret: bool = False, names: Collection[str] = ()) -> list[str]:
    """The paths of the secrets `value` carries in clear (a string under a secret's name that is
    not a reference, or any string holding a private key), sorted. Numbers, booleans and nulls
    are never secrets (a `token_ttl` of 300 is fine). `names`: as `_walk`'s."""
    found = [where for where, leaf, secret in _walk(value, path, under_secret, names)
             if isinstance(leaf, str) and ((secret and leaf and not is_reference(leaf)) or holds_private_key(leaf))]
    return sorted(found)


def references(value: Any) -> set[str]:
    """The names of the secrets `value` refers to."""
    return {m.group(1) for _, leaf, _ in _walk(value, "", False) if isinstance(leaf, str) and (m := REFERENCE.fullmatch(leaf))}


def refused(paths: list[str], what: str) -> str:
    """The reason a payload carrying secrets in clear is refused (paths only, never a value)."""
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return (f"{what} carries what looks like a secret in clear at {shown}: the log would keep it forever; {HINT}")


def private_keys(value: Any, path: str = "") -> list[str]:
    """The paths of the strings in `value` that hold a PEM private key, whatever their names."""
    return sorted(where for where, leaf, _ in _walk(value, path, False) if holds_private_key(leaf))


MASK = "********"


def masked(value: Any, under_secret: bool = False, names: Collection[str] = (), path: str = "") -> Any:
    """A copy of `value` in which every secret in clear reads `********` (for answers); `names`
    as `_walk`'s, `path` where `value` is."""
    if isinstance(value, Mapping):
        return {k: masked(v, under_secret or (path not in names and secret_name(str(k))), names,
                          f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v, under_secret, names, f"{path}[]") for v in value]
    if isinstance(value, str) and ((under_secret and value and not is_reference(value)) or holds_private_key(value)):
        return MASK
    return value


def resolved(value: Any, named: Mapping[str, Any]) -> Any:
    """A copy of `value` with every reference replaced by its secret from `named` (the worker
    does this, and only it; a name missing from `named` is left as it is)."""
    if isinstance(value, Mapping):
        return {k: resolved(v, named) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [resolved(v, named) for v in value]
    if isinstance(value, str) and (m := REFERENCE.fullmatch(value)) and m.group(1) in named:
        return named[m.group(1)]
    if isinstance(value, str) and value[:1] in ("{", "[") and (inner := _json(value)) is not None and references(inner):
        return json.dumps(resolved(inner, named))  # a map given as a JSON string (a shell `env`)
    return value
