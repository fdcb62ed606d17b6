"""TLS for every hop (docs/security.md, "TLS"; decision 18): the local CA (`ca`), the
contexts clients and servers use (`context`), and what a deployment issues and rotates."""
