"""Certificates an operator gives: `muster up --tls` serves its own as they are (a `tls/ca.pem`
without `ca.key` is the operator's CA), and a server refuses a pair that cannot serve with a
sentence naming the file, before anything listens (muster/runtime/tls.py, muster/tls/ca.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from muster.runtime.tls import DeploymentTls
from muster.tls.ca import LocalCA, check_server_pair
from muster.tls.context import TlsError
from services.tracker.entrypoint import main as tracker


def _operators(tmp_path: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> tuple[Path, dict[Path, bytes]]:
    """A data dir's tls/ as an operator fills it: the CA's certificate (its key kept elsewhere)
    and the two servers' pairs, made by the operator's CA."""
    theirs = LocalCA.load_or_create(tmp_path / "pki")
    folder = tmp_path / "data" / "tls"
    (folder / "servers").mkdir(parents=True)
    (folder / "ca.pem").write_bytes(theirs.cert_path.read_bytes())
    for name in ("nats", "tracker"):
        theirs.issue(folder / "servers" / name, f"{name}.example", list(hosts))
    return folder, {f: f.read_bytes() for f in folder.rglob("*") if f.is_file()}


def test_up_serves_an_operators_certificates_as_they_are(tmp_path: Path) -> None:
    folder, given = _operators(tmp_path)
    tls = DeploymentTls(folder)
    assert not tls.issuing
    tls.prepare()
    tls.rotate()  # (the operator replaced the files: they are checked, not made)
    assert {f: f.read_bytes() for f in folder.rglob("*") if f.is_file()} == given  # no CA of ours, nothing replaced
    assert tls.nats().cert == str(folder / "servers" / "nats.pem")


def test_an_operators_certificates_that_cannot_serve_are_named(tmp_path: Path) -> None:
    folder, _ = _operators(tmp_path, hosts=("nats.example",))
    with pytest.raises(TlsError, match=r"servers/nats.pem does not name 127.0.0.1, which clients of this deployment dial"):
        DeploymentTls(folder).prepare()
    (folder / "servers" / "tracker.key").unlink()
    with pytest.raises(TlsError, match=r"ca.pem is there without ca.key.*/servers/tracker.key is missing"):
        DeploymentTls(folder, names=("nats.example",), host="nats.example").check_given()
    with pytest.raises(TlsError, match=r"--mtls needs the CA's key"):
        DeploymentTls(folder, mutual=True).prepare()
    assert not (folder / "ca.key").exists()


def test_a_pair_that_cannot_serve_is_refused_naming_the_file(tmp_path: Path) -> None:
    ca = LocalCA.load_or_create(tmp_path / "ca")
    good = ca.issue(tmp_path / "good", "t", ["127.0.0.1"])
    other = ca.issue(tmp_path / "other", "t", ["127.0.0.1"])
    ended = ca.issue(tmp_path / "ended", "t", ["127.0.0.1"], days=-1 / 1440)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    check_server_pair(good.cert, good.key)
    for cert, key, said in [(garbage, good.key, f"{garbage} holds no PEM certificate"),
                            (good.key, good.cert, f"{good.key} holds no PEM certificate"),
                            (good.cert, garbage, f"{garbage} holds no PEM private key"),
                            (good.cert, other.key, f"the key in {other.key} is not the key of the certificate in {good.cert}"),
                            (ended.cert, ended.key, f"the certificate in {ended.cert} ended on "),
                            (tmp_path / "missing.pem", good.key, f"cannot read {tmp_path / 'missing.pem'}")]:
        with pytest.raises(ValueError) as refused:
            check_server_pair(cert, key)
        assert str(refused.value).startswith(said), str(refused.value)


def test_the_tracker_refuses_a_pair_that_cannot_serve_before_it_starts(tmp_path: Path) -> None:
    ca = LocalCA.load_or_create(tmp_path / "ca")
    good = ca.issue(tmp_path / "good", "t", ["127.0.0.1"])
    result = CliRunner().invoke(tracker, ["--port", "0", "--tls-cert", str(good.key), "--tls-key", str(good.key)])
    assert result.exit_code == 2 and f"{good.key} holds no PEM certificate" in result.output, result.output
