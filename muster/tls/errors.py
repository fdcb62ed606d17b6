"""The one error of muster's TLS settings, apart so that the CA and the contexts both raise it
without importing each other."""

from __future__ import annotations


class TlsError(RuntimeError):
    """A TLS setting that cannot work; the message names the file or the flag to fix."""
