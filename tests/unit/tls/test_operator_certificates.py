"""Certificates an operator gives: `muster up --tls` serves its own as they are (a `tls/ca.pem`
without `ca.key` is the operator's CA), and a server refuses a pair that cannot serve with a
sentence naming the file, before anything listens (muster/runtime/tls.py, muster/tls/ca.py)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path
from typing import Any

import pytest
import trustme
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

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


def _trustme_deployment(tmp_path: Path, sign: Any, *, ca: Any = None, chain: bool = True) -> Path:
    """A data dir's tls/ with `ca`'s certificate as ca.pem and the servers' pairs from `sign`
    (a trustme CA), whole chains (the leaf, then any intermediates) unless `chain` is false."""
    folder = tmp_path / "data" / "tls"
    (folder / "servers").mkdir(parents=True)
    (ca or sign).cert_pem.write_to_path(str(folder / "ca.pem"))
    for name in ("nats", "tracker"):
        leaf = sign.issue_cert("127.0.0.1", "localhost")
        leaf.private_key_pem.write_to_path(str(folder / "servers" / f"{name}.key"))
        pems = leaf.cert_chain_pems if chain else leaf.cert_chain_pems[:1]
        (folder / "servers" / f"{name}.pem").write_bytes(b"".join(p.bytes() for p in pems))
    return folder


def test_an_operators_certificate_of_another_ca_is_refused_at_start_naming_both_files(tmp_path: Path) -> None:
    """Before, it started, and every client's handshake failed after it (unable to get local
    issuer certificate), the tracker's and the services' alike."""
    folder = _trustme_deployment(tmp_path, trustme.CA(), ca=trustme.CA())
    with pytest.raises(TlsError) as refused:
        DeploymentTls(folder).prepare()
    said = str(refused.value)
    assert said.startswith(f"the certificate in {folder / 'servers' / 'nats.pem'} does not chain to the CA in "
                           f"{folder / 'ca.pem'} (it is issued by "), said
    assert "\n" not in said


def test_an_operators_chain_through_an_intermediate_is_served_and_one_without_it_refused(tmp_path: Path) -> None:
    root = trustme.CA()
    DeploymentTls(_trustme_deployment(tmp_path / "whole", root.create_child_ca(), ca=root)).prepare()
    folder = _trustme_deployment(tmp_path / "cut", root.create_child_ca(), ca=root, chain=False)
    with pytest.raises(TlsError, match=r"servers/nats.pem does not chain to the CA in .*intermediates after it in nats.pem"):
        DeploymentTls(folder).prepare()


def test_an_operators_ca_or_intermediate_out_of_its_dates_is_named(tmp_path: Path) -> None:
    """The leaf's own dates are `check_server_pair`'s; those of the certificates above it are
    named with the file they are in, not in OpenSSL's words."""
    ended = trustme.CA()
    ended._certificate = _redated(ended, days=-1)  # (trustme makes CAs valid for ten years)
    folder = _trustme_deployment(tmp_path / "ended", ended)
    with pytest.raises(TlsError, match=rf"the certificate .* in {folder / 'ca.pem'} ended on .*: every client would refuse "):
        DeploymentTls(folder).prepare()
    root = trustme.CA()
    middle = root.create_child_ca()
    middle._certificate = _redated(middle, days=30, start_in_days=2, signer=root)
    folder = _trustme_deployment(tmp_path / "early", middle, ca=root)
    with pytest.raises(TlsError, match=rf"in {folder / 'servers' / 'nats.pem'} is valid only from "):
        DeploymentTls(folder).prepare()


def test_an_operators_certificate_for_the_host_named_but_refused_by_a_client_is_named(tmp_path: Path) -> None:
    """A name the certificate carries, that a client still refuses (here a SAN naming the IP as
    a DNS name): the handshake's own reason, naming the file and the host dialled."""
    ca = trustme.CA()
    folder = _trustme_deployment(tmp_path, ca)
    (folder / "servers" / "nats.pem").write_bytes(_dns_named(ca, folder / "servers" / "nats.key"))
    with pytest.raises(TlsError, match=r"a client trusting .*/ca.pem and dialling 127.0.0.1 refuses the certificate in "
                                         r".*/servers/nats.pem: IP address mismatch"):
        DeploymentTls(folder).prepare()


def _redated(ca: Any, days: float, start_in_days: float = 0, signer: Any = None) -> Any:
    """`ca`'s certificate again, same key and subject, valid from `start_in_days` for `days`
    (ended when negative), signed by `signer` (itself when None)."""
    cert = ca._certificate
    now = dt.datetime.now(dt.UTC)
    start = now + dt.timedelta(days=start_in_days) if days > 0 else now - dt.timedelta(days=30)
    builder = (x509.CertificateBuilder().subject_name(cert.subject).issuer_name(cert.issuer).public_key(cert.public_key())
               .serial_number(cert.serial_number).not_valid_before(start).not_valid_after(now + dt.timedelta(days=days)))
    for ext in cert.extensions:
        builder = builder.add_extension(ext.value, ext.critical)
    return builder.sign((signer or ca)._private_key, hashes.SHA256())


def _dns_named(ca: Any, key_path: Path, *names: str, ip: bool = False) -> bytes:
    """A certificate for the key in `key_path` naming `names` (default "127.0.0.1") as DNS
    names, but with `ip` its first as an IP address."""
    names = names or ("127.0.0.1",)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    if ip:
        sans[0] = x509.IPAddress(ipaddress.ip_address(names[0]))
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(ca._certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())  # type: ignore[arg-type]
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca._private_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def test_every_tls_name_is_dialled_as_a_client_dials_it(tmp_path: Path) -> None:
    """`--tls-name 10.0.0.5` in a certificate that names "10.0.0.5" as a DNS name: a client
    dialling the address refuses it, so the start does."""
    ca = trustme.CA()
    folder = _trustme_deployment(tmp_path, ca)
    for name in ("nats", "tracker"):
        key = folder / "servers" / f"{name}.key"
        (folder / "servers" / f"{name}.pem").write_bytes(_dns_named(ca, key, "127.0.0.1", "localhost", "10.0.0.5", ip=True))
    DeploymentTls(folder).prepare()  # 127.0.0.1 as an IP address: served
    with pytest.raises(TlsError, match=r"dialling 10.0.0.5 refuses the certificate in .*/servers/nats.pem"):
        DeploymentTls(folder, names=("10.0.0.5",)).prepare()


def test_an_ended_certificate_beside_the_ca_in_a_bundle_does_not_stop_the_start(tmp_path: Path) -> None:
    """ca.pem as a bundle: the CA that signs, and an old root that has ended (OpenSSL ignores it)."""
    ca, old = trustme.CA(), trustme.CA()
    old._certificate = _redated(old, days=-1)
    folder = _trustme_deployment(tmp_path, ca)
    (folder / "ca.pem").write_bytes(old.cert_pem.bytes() + ca.cert_pem.bytes())
    DeploymentTls(folder).prepare()


def test_an_operators_certificate_not_yet_valid_or_with_another_key_is_named_at_start(tmp_path: Path) -> None:
    ca = trustme.CA()
    folder = _trustme_deployment(tmp_path, ca)
    cert, key = folder / "servers" / "tracker.pem", folder / "servers" / "tracker.key"
    leaf = x509.load_pem_x509_certificate(cert.read_bytes())
    early = (x509.CertificateBuilder().subject_name(leaf.subject).issuer_name(leaf.issuer).public_key(leaf.public_key())
             .serial_number(x509.random_serial_number())
             .not_valid_before(dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
             .not_valid_after(dt.datetime.now(dt.UTC) + dt.timedelta(days=30)))
    for ext in leaf.extensions:
        early = early.add_extension(ext.value, ext.critical)
    cert.write_bytes(early.sign(ca._private_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    with pytest.raises(TlsError, match=rf"^the certificate in {cert} is valid only from .* UTC \(is this machine's clock right\?\)$"):
        DeploymentTls(folder).prepare()
    key.write_bytes((folder / "servers" / "nats.key").read_bytes())
    with pytest.raises(TlsError, match=rf"^the key in {key} is not the key of the certificate in {cert}$"):
        DeploymentTls(folder).prepare()
