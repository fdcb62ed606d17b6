"""Whether the clients of a deployment will accept a server's certificate: its chain to the CA
they trust, and the name they dial, checked at start rather than at every handshake after it.

The check is the handshake itself, in memory: a client context as every muster client builds it
(`client_context`, trusting `ca.pem`) against the server's context (`server_context`, serving
the pair), so what passes here is what clients accept, intermediates and all. Before it, each
certificate of the chain is read for its dates, so a CA or an intermediate that has ended is
named by its file rather than in OpenSSL's words.
"""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from cryptography import x509

from .context import ClientTls, client_context, server_context
from .errors import TlsError

NOT_OURS = ("unable to get local issuer certificate", "self-signed certificate in certificate chain",
            "self signed certificate in certificate chain", "certificate signature failure",
            "unable to get issuer certificate", "unable to verify the first certificate")


def check_chain(cert: Path, key: Path, ca: Path, host: str) -> None:
    """TlsError, in one sentence naming the file and what is wrong, unless a client trusting `ca`
    that dials `host` accepts the pair in `cert` and `key` (already checked as a pair, within
    its dates, by `check_server_pair`)."""
    chain = x509.load_pem_x509_certificates(cert.read_bytes())
    try:
        authorities = x509.load_pem_x509_certificates(ca.read_bytes())
    except (OSError, ValueError):
        raise TlsError(f"{ca} holds no PEM certificate: it is the CA clients of this deployment trust") from None
    now = dt.datetime.now(dt.UTC)
    issuers = [a for a in authorities if a.subject == chain[-1].issuer]
    # Of a bundle, only the CA that signs: an old root kept beside it does not stop the start,
    # nor does an ended one whose renewal (same name) is there too.
    current = [a for a in issuers if a.not_valid_before_utc <= now < a.not_valid_after_utc]
    for where, one in [*((cert, c) for c in chain[1:]), *((ca, c) for c in issuers[:1] if not current)]:
        if one.not_valid_after_utc <= now:
            raise TlsError(f"the certificate {one.subject.rfc4514_string()} in {where} ended on "
                           f"{one.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: every client would refuse {cert}, which it signs "
                           "or chains to")
        if one.not_valid_before_utc > now:
            raise TlsError(f"the certificate {one.subject.rfc4514_string()} in {where} is valid only from "
                           f"{one.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (is this machine's clock right?)")
    refused = _handshake(cert, key, ca, host)
    if refused is None:
        return
    if refused in NOT_OURS:
        raise TlsError(f"the certificate in {cert} does not chain to the CA in {ca} (it is issued by "
                       f"{chain[-1].issuer.rfc4514_string()}; {ca} holds "
                       f"{', '.join(a.subject.rfc4514_string() for a in authorities)}): clients trust only that CA, so "
                       f"every handshake would fail; give a certificate that CA signed (intermediates after it in "
                       f"{cert.name}), or that CA's certificate in {ca}")
    raise TlsError(f"a client trusting {ca} and dialling {host} refuses the certificate in {cert}: {refused}")


def _handshake(cert: Path, key: Path, ca: Path, host: str) -> str | None:
    """OpenSSL's reason a client refuses the server, or None when the handshake completes."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    sides = [client_context(ClientTls(ca)).wrap_bio(client_in, client_out, server_hostname=host),
             server_context(cert, key).wrap_bio(server_in, server_out, server_side=True)]
    done = [False, False]
    for _ in range(8):  # TLS 1.3 completes in two flights each way, 1.2 in three
        for i, side in enumerate(sides):
            if not done[i]:
                try:
                    side.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLCertVerificationError as err:
                    return str(err.verify_message)
                except ssl.SSLError as err:
                    return str(err.reason or err)
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done):
            return None
    return "the handshake did not complete"
