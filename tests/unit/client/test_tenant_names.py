"""A tenant that is no tenant's name, given to a command that reads through the tracker, is said
before anything is asked, as a request on the bus says it: the tracker's answer named its
HTTP header (`X-Muster-Tenant 'a.b' is not a tenant name`), which no command takes."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from muster.cli import main


@pytest.mark.parametrize("args", [["cluster", "list"], ["job", "list"], ["cluster", "show", "web"]])
@pytest.mark.parametrize("tenant", ["a.b", "ñ", "a>"])
def test_a_tenant_that_is_no_name_is_refused_before_the_tracker_is_asked(args: list[str], tenant: str) -> None:
    result = CliRunner().invoke(main, [*args, "--tenant", tenant], prog_name="muster",
                                env={"MUSTER_TRACKER_URL": "http://127.0.0.1:1", "NATS_URL": "nats://127.0.0.1:1"})
    assert result.exit_code == 2, result.output
    assert f"Error: tenant {tenant!r} is not a valid name: use 1-128 letters, digits, '-' or '_'" in result.output, result.output
