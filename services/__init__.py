"""The services of muster; importing one runs muster's start-up rules first (muster/_startup.py)."""

import muster  # noqa: F401
