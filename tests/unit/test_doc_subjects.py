"""Every NATS subject the README and the guides name has the shape `contracts/subjects.py` makes:
docs/faults.md, docs/scaling.md, docs/client.md, docs/tracker.md and docs/solver.md still named
the operation and query subjects without the requester's `<principal>` token
(`muster.ops.<tenant>.<verb>`, `muster.q.<tenant>.job.<id>`) long after decision 9 added it, so
a `nats req` written from them reached nobody (found walking the fault docs, session 17).

A placeholder (`<tenant>`, `{jobId}`, `*`) stands for a token the code fills in; a literal must be
the code's; `>` at the end stands for one token or more; `a|b` is each of them. A span that
elides (`...`, `…`) is not checked."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from contracts import subjects

ROOT = Path(__file__).parents[2]
SPAN = re.compile(r"`(muster\.(?:evt|ops|q|task|shard|gov|auth|pools?|metrics)\b[^`]*)`")
PLACEHOLDER = re.compile(r"<[^>]+>|\{[^}]+\}")
ANY = "*"
GENERIC = ["muster", "evt", ANY, ANY, ANY]
"""The log's subjects as docs/bus.md introduces them (`muster.evt.<tenant>.<aggregate>.<id>`):
placeholders only, not a shape any literal fits."""


def _shapes() -> list[list[str]]:
    """Every subject the code makes: its constants, and each function's answer for made-up
    tokens (which become `*`)."""
    found: set[str] = set()
    for name, value in vars(subjects).items():
        if isinstance(value, str) and value.startswith("muster."):
            found.add(value)
        elif inspect.isfunction(value) and value.__module__ == subjects.__name__ and not name.startswith("parse"):
            params = inspect.signature(value).parameters.values()
            args = [7 if p.annotation in (int, "int") else f"zz{i}" for i, p in enumerate(params)]
            made = value(*args)
            for subject in made if isinstance(made, list) else [made]:
                if isinstance(subject, str) and subject.startswith("muster."):
                    found.add(re.sub(r"\bzz\d+\b|\b7\b", ANY, subject))
    return [shape.split(".") for shape in sorted(found)]


def _tokens(span: str) -> list[str]:
    return PLACEHOLDER.sub(ANY, span).split(".")


def _fits(doc: list[str], code: list[str]) -> bool:
    """`doc` (a guide's subject) is one of the subjects `code` (the code's shape) stands for."""
    for i, token in enumerate(doc):
        if token == ">":
            return len(code) > i
        if i >= len(code):
            return False
        if token == ANY:
            if code[i] != ANY:
                return False
        elif code[i] != ANY and any(alternative != code[i] for alternative in token.split("|")):
            return False
    return len(doc) == len(code)


def _named() -> list[tuple[str, int, str]]:
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [(guide.name, n, span) for guide in guides for n, line in enumerate(guide.read_text().splitlines(), 1)
            for span in SPAN.findall(line) if "..." not in span and "…" not in span and not span.endswith(".")]


def test_every_subject_a_guide_names_is_one_the_code_makes() -> None:
    shapes = _shapes()
    wrong = [f"{guide}:{n}: {span}" for guide, n, span in _named()
             if _tokens(span) != GENERIC and not any(_fits(_tokens(span), s) for s in shapes)]
    assert wrong == []


def test_the_check_sees_what_it_checks() -> None:
    shapes = _shapes()
    assert len(_named()) > 60

    def fits(span: str) -> bool:
        return any(_fits(_tokens(span), s) for s in shapes)

    assert fits("muster.ops.<tenant>.<principal>.<verb>") and fits("muster.q.<tenant>.<principal>.job.<id>")
    assert fits("muster.evt.<t>.job.<job-id>.tasks") and fits("muster.shard.>") and fits("muster.gov.<t>.<p>.put|delete")
    assert not fits("muster.ops.<tenant>.<verb>") and not fits("muster.q.<tenant>.job.<id>")
    assert not fits("muster.shard.<n>.ops.<tenant>.<verb>") and not fits("muster.evt.<t>.task.<job>.<task>")
    assert not fits("muster.q.<tenant>.solve") and not fits("muster.evt.<t>.jobs.<id>") and not fits("muster.evt.*.task.*.*")
