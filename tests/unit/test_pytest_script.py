"""The venv's `pytest` script collects what `python -m pytest` collects: docs/faults.md runs the
fault suite as `.venv/bin/pytest -m fault -s`, which stopped at collection ("No module named
'bench'": two test modules import the benchmarks, and only `python -m` puts the repository on
the path; found walking the fault docs, session 17)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPT = Path(sys.executable).parent / "pytest"


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no pytest script next to {sys.executable}")
def test_the_pytest_script_collects_the_modules_that_import_the_benchmarks() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(SCRIPT), "--collect-only", "-q", "-p", "no:cacheprovider", "tests/unit/bench/test_goals.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
