"""Writing a script's own section of docs/benchmarks.md (`--write-docs`): the section from its
`## <title>` line up to the next `## `, replaced, or added at the end."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(title: str, section: str, docs: Path = DOCS) -> None:
    text = docs.read_text(encoding="utf-8") if docs.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text, count=1) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    docs.write_text(text, encoding="utf-8")
