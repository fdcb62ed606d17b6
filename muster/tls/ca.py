"""A local certificate authority (the `cryptography` library): made on first start, it signs the
certificates of the nats-servers, the tracker and, for mutual TLS, each client.

Every file it writes is private (mode 0600) and replaced atomically, so a server that reloads
its certificate in the middle of a rotation reads the old pair or the new one, never half of
one. Keys are ECDSA P-256: quick to make (a rotation makes new keys) and understood by Go's
TLS (nats-server), OpenSSL (Python) and every browser.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .errors import TlsError

CA_DAYS = 3650
LEAF_DAYS = 90
RENEW_BEFORE_DAYS = 30
"""A certificate this close to its end is made again at the next start."""


@dataclass(frozen=True)
class Pair:
    """Where one certificate and its key are."""

    cert: Path
    key: Path


def write_private(path: Path, data: bytes) -> None:
    """Create or replace `path` with `data`, readable by its owner only, in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def host_problem(host: str) -> str | None:
    """Why `host` cannot be a name a certificate carries, or None: a DNS name (a leading `*.`
    allowed) or an IP address. A space, a port or a URL went into the certificate as a DNS name
    no client ever dials, and every handshake by that name failed later, naming the certificate."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.removeprefix("*.").removesuffix(".").split(".")
    if len(host) <= 253 and all(_LABEL.fullmatch(label) for label in labels):
        return None
    return f"{host!r} is not a DNS name or an IP address (letters, digits, '-' and '.'; no port, no scheme, no space)"


def alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """IP addresses as IP entries (what a client connecting to 127.0.0.1 checks), the rest as DNS names."""
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(h.strip() for h in hosts if h.strip()):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def names_of(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in san.get_values_for_type(x509.IPAddress)} | set(san.get_values_for_type(x509.DNSName))


class LocalCA:
    """The CA in `folder` (`ca.pem`, `ca.key`), made by `load_or_create` when missing."""

    def __init__(self, folder: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
        self.folder = folder
        self.cert = cert
        self.key = key

    @property
    def cert_path(self) -> Path:
        return self.folder / "ca.pem"

    @classmethod
    def load_or_create(cls, folder: Path, name: str = "muster local CA") -> LocalCA:
        """The CA in `folder`, or a new one when neither file is there. A TlsError names what
        is wrong with the files that are: a CA is never made over one of them."""
        cert_path, key_path = folder / "ca.pem", folder / "ca.key"
        if cert_path.exists() != key_path.exists():
            there, missing = (cert_path, key_path) if cert_path.exists() else (key_path, cert_path)
            raise TlsError(f"{there} is there without {missing.name}: a CA needs both (remove it, and a new CA is made)")
        if cert_path.exists():
            try:
                key = serialization.load_pem_private_key(_read(key_path, "PEM private key"), password=None)
            except (ValueError, TypeError, UnsupportedAlgorithm) as err:
                raise TlsError(str(err) if str(err).startswith(("cannot read", str(key_path))) else
                               f"{key_path} holds no PEM private key muster can read (one without a passphrase)") from None
            if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
                raise TlsError(f"{key_path}: a CA key muster signs with is EC or RSA, not {type(key).__name__}")
            try:
                cert = x509.load_pem_x509_certificate(_read(cert_path, "PEM certificate"))
            except ValueError as err:
                raise TlsError(str(err) if str(err).startswith(("cannot read", str(cert_path))) else
                               f"{cert_path} holds no PEM certificate") from None
            if not _same_key(key, cert):
                raise TlsError(f"the key in {key_path} is not the key of the CA certificate in {cert_path}")
            return cls(folder, cert, key)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        write_private(key_path, _pem_key(key))  # the key first: a CA certificate without its key is no CA
        write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return cls(folder, cert, key)

    def issue(self, path: Path, name: str, hosts: Sequence[str] = (), *, server: bool = True,
              days: float = LEAF_DAYS) -> Pair:
        """A new key and a certificate for `name` at `path` (`<path>.pem`, `<path>.key`).
        A server's certificate names `hosts` and may also be used as a client's (a nats-server
        dials its routes with it); a client's is for client authentication only."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False, crl_sign=False,
                                         content_commitment=False, data_encipherment=False, key_agreement=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        names = alt_names(hosts if server else [*hosts, name])
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pair = Pair(path.with_suffix(".pem"), path.with_suffix(".key"))
        # The key first, then the certificate: a reload between the two renames sees a new key
        # with the old certificate and fails, keeping the old pair (nats-server keeps its
        # config on a failed reload; the tracker keeps its context).
        write_private(pair.key, _pem_key(key))
        write_private(pair.cert, cert.public_bytes(serialization.Encoding.PEM))
        return pair

    def ensure(self, path: Path, name: str, hosts: Sequence[str] = (), *, server: bool = True) -> Pair:
        """The pair at `path`, made again when missing, not from this CA, not naming every one
        of `hosts`, near its end, or not a pair at all (a file that is no PEM, a key that is
        not the certificate's: a stop between the two renames of `issue`). A TlsError names a
        file that cannot be read or replaced (a folder in its place)."""
        pair = Pair(path.with_suffix(".pem"), path.with_suffix(".key"))
        if pair.cert.exists() and pair.key.exists():
            cert, key = _load(pair.cert, x509.load_pem_x509_certificate), _load(pair.key, _private_key)
            if cert is not None and key is not None and _same_key(key, cert):
                fresh = cert.not_valid_after_utc - _now() > dt.timedelta(days=RENEW_BEFORE_DAYS)
                wanted = {str(n.value) for n in alt_names(hosts)}
                if fresh and cert.issuer == self.cert.subject and wanted <= names_of(cert) and _signed_by(cert, self.cert):
                    return pair
        return self.issue(path, name, hosts, server=server)


def _private_key(data: bytes) -> Any:
    return serialization.load_pem_private_key(data, password=None)


def _load(path: Path, parse: Any) -> Any:
    """`parse` of the file's bytes; None when they do not parse (a file muster made again)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TlsError(f"cannot read {path}: {err.strerror or err}") from None
    try:
        return parse(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def check_server_pair(cert: Path, key: Path) -> None:
    """A server's certificate and key as an operator gives them (their own PKI's, or ours):
    ValueError naming the file and what is wrong, before anything serves them. OpenSSL's own
    word for most of this is "PEM lib", and it serves a certificate that has ended, which every
    client then refuses."""
    data = _read(cert, "PEM certificate")
    try:
        certificate = x509.load_pem_x509_certificate(data)
    except ValueError:
        raise ValueError(f"{cert} holds no PEM certificate") from None
    data = _read(key, "PEM private key")
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ValueError(f"{key} holds no PEM private key this server can read (one without a passphrase)") from None
    if not _same_key(private, certificate):
        raise ValueError(f"the key in {key} is not the key of the certificate in {cert}")
    now = _now()
    if certificate.not_valid_after_utc <= now:
        raise ValueError(f"the certificate in {cert} ended on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: every "
                         "client would refuse it; give a new one (`muster tls issue --renew` makes one from muster's CA)")
    if certificate.not_valid_before_utc > now:
        raise ValueError(f"the certificate in {cert} is valid only from {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} "
                         "UTC (is this machine's clock right?)")


def _same_key(private: Any, certificate: x509.Certificate) -> bool:
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(private.public_key().public_bytes(*der) == certificate.public_key().public_bytes(*der))


def _read(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror or err}") from None
    if b"-----BEGIN" not in data:
        raise ValueError(f"{path} holds no {what}")
    return data


def not_after(path: Path) -> dt.datetime:
    """When the certificate in `path` (PEM) ends."""
    return x509.load_pem_x509_certificate(path.read_bytes()).not_valid_after_utc


def serial_of(pem: bytes) -> int:
    """The serial number of a PEM or DER certificate (which one a server presents)."""
    cert = x509.load_pem_x509_certificate(pem) if pem.startswith(b"-----") else x509.load_der_x509_certificate(pem)
    return int(cert.serial_number)
