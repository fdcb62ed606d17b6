"""`muster up --help`, docs/runtime.md and the README name every service `muster up` starts: all
three said "the four services" while it started eight (auth, solver, planner, provisioner,
tracker, pool, governance, notifier; found walking docs/runtime.md, session 17)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from muster.cli import main
from muster.runtime.supervisor import Deployment

ROOT = Path(__file__).parents[2]


def _started(tmp_path: Path) -> set[str]:
    """The processes of a default `muster up` (its own server, so auth on), nats-server aside."""
    return set(Deployment(tmp_path, auth_dir=tmp_path / "auth").commands())


def _unnamed(text: str, services: set[str]) -> list[str]:
    flat = " ".join(text.split())
    return sorted(s for s in services if s not in flat)


def test_up_names_every_service_it_starts(tmp_path: Path) -> None:
    services = _started(tmp_path)
    assert {"auth", "planner", "governance", "notifier"} <= services
    help_text = CliRunner().invoke(main, ["up", "--help"]).output
    runtime = (ROOT / "docs" / "runtime.md").read_text().split("\n## ")[0]
    readme = (ROOT / "README.md").read_text()
    demo = readme[readme.index("`make demo` starts"):][:600]
    assert {"help": _unnamed(help_text, services), "runtime.md": _unnamed(runtime, services),
            "README": _unnamed(demo, services)} == {"help": [], "runtime.md": [], "README": []}
    assert "four services" not in " ".join(help_text.split())
