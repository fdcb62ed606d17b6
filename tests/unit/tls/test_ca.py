"""The local CA (muster/tls/ca.py): private files, the right names and usages, kept or made again."""

from __future__ import annotations

import stat
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from muster.tls.ca import LocalCA, names_of, serial_of
from muster.tls.natsconf import ServerTls, client_block, route_block


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_the_ca_is_made_once_and_every_file_is_private(tmp_path: Path) -> None:
    ca = LocalCA.load_or_create(tmp_path / "tls")
    again = LocalCA.load_or_create(tmp_path / "tls")
    assert again.cert.serial_number == ca.cert.serial_number
    pair = ca.issue(tmp_path / "tls" / "servers" / "nats", "muster nats", ["127.0.0.1", "localhost"])
    files = [tmp_path / "tls" / "ca.pem", tmp_path / "tls" / "ca.key", pair.cert, pair.key]
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
    assert stat.S_IMODE((tmp_path / "tls" / "servers").stat().st_mode) == 0o700
    assert not list((tmp_path / "tls").rglob("*.tmp"))


def test_a_server_certificate_names_its_hosts_and_serves_routes_too(tmp_path: Path) -> None:
    ca = LocalCA.load_or_create(tmp_path)
    server = _cert(ca.issue(tmp_path / "servers" / "nats", "muster nats", ["127.0.0.1", "::1", "nats-1"]).cert)
    assert names_of(server) == {"127.0.0.1", "::1", "nats-1"}
    # a node dials its routes with its own certificate: it is a client there
    assert _usages(server) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    server.verify_directly_issued_by(ca.cert)
    client = _cert(ca.issue(tmp_path / "clients" / "planner", "muster planner", server=False).cert)
    assert _usages(client) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_ensure_keeps_a_good_certificate_and_replaces_a_stale_one(tmp_path: Path) -> None:
    ca = LocalCA.load_or_create(tmp_path / "ca")
    path = tmp_path / "ca" / "servers" / "tracker"
    first = serial_of(ca.ensure(path, "t", ["127.0.0.1"]).cert.read_bytes())
    assert serial_of(ca.ensure(path, "t", ["127.0.0.1"]).cert.read_bytes()) == first
    # a name more (muster up --tls-name): made again
    more = serial_of(ca.ensure(path, "t", ["127.0.0.1", "muster.example"]).cert.read_bytes())
    assert more != first
    # signed by another CA (a data dir's CA made again): made again
    other = LocalCA.load_or_create(tmp_path / "other")
    assert serial_of(other.ensure(path, "t", ["127.0.0.1"]).cert.read_bytes()) != more
    # near its end: made again
    short = serial_of(ca.issue(path, "t", ["127.0.0.1"], days=10).cert.read_bytes())
    assert serial_of(ca.ensure(path, "t", ["127.0.0.1"]).cert.read_bytes()) != short


def test_nats_blocks_shake_hands_in_tls_first_and_verify_routes_both_ways() -> None:
    tls = ServerTls("/t/n.pem", "/t/n.key", "/t/ca.pem")
    client = client_block(tls)
    assert "handshake_first: true" in client and "verify" not in client and 'ca_file: "/t/ca.pem"' in client
    assert "verify: true" in client_block(ServerTls("/t/n.pem", "/t/n.key", "/t/ca.pem", verify_clients=True))
    route = route_block(tls)
    assert "verify: true" in route and 'cert_file: "/t/n.pem"' in route and "insecure" not in route


def test_a_ca_is_never_made_over_files_that_are_there(tmp_path: Path) -> None:
    """A half CA, an unreadable key or one that is not the certificate's is named (the command
    says so, exit 2), not an internal error, nor replaced by a new CA; an RSA CA of an
    operator's signs as well as muster's own."""
    import pytest
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from muster.tls.context import TlsError

    folder = tmp_path / "tls"
    ca = LocalCA.load_or_create(folder)
    pem, key = folder / "ca.pem", folder / "ca.key"
    other = LocalCA.load_or_create(tmp_path / "other")
    for key_text, said in [(b"garbage\n", f"{key} holds no PEM private key"),
                           ((tmp_path / "other" / "ca.key").read_bytes(), f"the key in {key} is not the key of the CA certificate")]:
        key.write_bytes(key_text)
        with pytest.raises(TlsError, match=said):
            LocalCA.load_or_create(folder)
    key.unlink()
    with pytest.raises(TlsError, match=f"{pem} is there without ca.key"):
        LocalCA.load_or_create(folder)
    assert _cert(pem).serial_number == ca.cert.serial_number and not key.exists()

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "ops CA")])
    now = ca.cert.not_valid_before_utc
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(rsa_key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + (other.cert.not_valid_after_utc - now))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(rsa_key, hashes.SHA256()))
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    leaf = _cert(LocalCA.load_or_create(folder).issue(folder / "servers" / "nats", "n", ["127.0.0.1"]).cert)
    leaf.verify_directly_issued_by(cert)


def test_ensure_makes_again_what_is_no_pair_and_names_what_it_cannot_read(tmp_path: Path) -> None:
    """A certificate file that is no PEM, or a key that is not the certificate's (a stop
    between the two renames of a rotation), would stop nats-server at the next start: made again."""
    import pytest

    from muster.tls.context import TlsError

    ca = LocalCA.load_or_create(tmp_path / "ca")
    path = tmp_path / "ca" / "servers" / "nats"
    first = ca.ensure(path, "n", ["127.0.0.1"])
    first.cert.write_text("garbage\n")
    second = serial_of(ca.ensure(path, "n", ["127.0.0.1"]).cert.read_bytes())
    first.key.write_bytes(ca.issue(tmp_path / "other", "o", ["127.0.0.1"]).key.read_bytes())
    third = ca.ensure(path, "n", ["127.0.0.1"])
    assert serial_of(third.cert.read_bytes()) != second
    from muster.tls.ca import check_server_pair

    check_server_pair(third.cert, third.key)
    third.cert.unlink()
    third.cert.mkdir()
    with pytest.raises(TlsError, match=f"cannot read {third.cert}: Is a directory"):
        ca.ensure(path, "n", ["127.0.0.1"])
