"""Issue #18.2: what counts as a secret, at any depth, and references to named secrets."""

from __future__ import annotations

import pytest

from contracts.secrets import MASK, masked, private_keys, references, resolved, secret_name, secrets_in_clear

PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----"


@pytest.mark.parametrize("name", ["password", "db_password", "dbPassword", "DB-PASSWD", "passphrase", "secret", "client_secret",
                                  "token", "apiToken", "api_key", "apikey", "ssh_key", "sshKey", "key", "private",
                                  "private_key", "credential", "credentials", "auth", "Authorization", "access-key",
                                  "server_root_password", "mytoken"])
def test_well_known_names_are_secret_names(name: str) -> None:
    assert secret_name(name)


@pytest.mark.parametrize("name", ["name", "hostname", "host_key", "primary_key", "key_serializer", "keyspace", "monkey",
                                  "identityfile", "passenger", "bypass", "replication", "user",
                                  # where or what kind a secret is (libcloud's OpenStack arguments)
                                  "ex_force_auth_url", "ex_force_auth_version", "token_type", "auth_method"])
def test_other_names_are_not(name: str) -> None:
    assert not secret_name(name)


def test_a_secret_is_found_at_any_depth_and_under_a_secret_name_anything_is() -> None:
    value = {"auth": {"user": "bob", "password": "x"}, "hosts": [{"h": "a", "ssh_key": "k"}], "n": {"token_ttl": 300},
             "ok": {"password": "secret://db"}, "pem": PEM, "empty": {"password": ""}}
    assert secrets_in_clear(value, "config") == ["config.auth.password", "config.auth.user", "config.hosts[0].ssh_key", "config.pem"]
    assert private_keys(value) == ["pem"]


def test_references_are_listed_resolved_and_never_masked() -> None:
    value = {"a": ["secret://x", {"password": "secret://y.z"}], "b": "secret://", "c": "see secret://x"}
    assert references(value) == {"x", "y.z"}
    assert resolved(value, {"x": "X!", "y.z": "YZ!"}) == {"a": ["X!", {"password": "YZ!"}], "b": "secret://", "c": "see secret://x"}
    env = '{"DB_PASSWORD": "secret://x", "HOME": "/root"}'
    assert references({"env": env}) == {"x"} and secrets_in_clear({"env": '{"API_TOKEN": "abc"}'}) == ["env.API_TOKEN"]
    assert resolved({"env": env}, {"x": "X!"}) == {"env": '{"DB_PASSWORD": "X!", "HOME": "/root"}'}
    assert masked({"password": "hunter2", "ref": {"token": "secret://t"}, "pem": PEM, "n": 1}) == {
        "password": MASK, "ref": {"token": "secret://t"}, "pem": MASK, "n": 1}


def test_deep_nesting_is_walked_without_recursion() -> None:
    value: object = "leak"
    for _ in range(5000):
        value = {"password": value} if isinstance(value, str) else {"x": value}
    assert len(secrets_in_clear(value)) == 1
