"""The operations table is the one list of operations: every command has its row, and the
planner, `build_plan` and `muster plan` agree with it."""

from __future__ import annotations

import pytest

from contracts.commands import VERB_OF, ConfigureCluster
from services.planner.cli import CLI_OPERATIONS
from services.planner.domain.operations import CHAINS, OFFLINE, OPERATIONS, ROLLING, VERBS, operation_of
from services.planner.domain.plan import PlanError, build_plan


def test_every_command_has_a_row_and_every_row_a_command() -> None:
    assert {op.command for op in OPERATIONS.values()} == set(VERB_OF)
    assert set(VERBS) == set(VERB_OF.values())
    assert all(op.verb == VERB_OF[op.command] for op in OPERATIONS.values())


def test_configure_with_restart_is_its_own_operation() -> None:
    assert operation_of(ConfigureCluster(cluster_id="c", config={})).name == "configure"
    assert operation_of(ConfigureCluster(cluster_id="c", config={}, restart=True)).name == "configure-restart"


def test_what_the_table_says_each_operation_needs() -> None:
    assert {n for n, op in OPERATIONS.items() if op.layout} == {"create", "expand", "shrink", "add-services", "remove-services"}
    assert {n for n, op in OPERATIONS.items() if op.shrinking} == {"delete", "shrink", "remove-services", "rollback"}
    assert {n for n, op in OPERATIONS.items() if op.target == "job"} == {"pause", "resume", "cancel", "retry", "approve", "reject"}
    assert all(op.rules for op in OPERATIONS.values() if op.target not in ("job", "plan"))
    assert all(not op.chain for op in OPERATIONS.values() if op.target == "job")


def test_the_rolling_rows_are_the_commands_with_a_rolling_field() -> None:
    from contracts import commands

    assert set(ROLLING) == {"configure", "configure-restart", "restart", "upgrade", "repair"}
    assert {OPERATIONS[n].command for n in ROLLING} == {
        name for name in VERB_OF if "rolling" in getattr(commands, name).model_fields}


def test_muster_plan_offers_the_offline_rows() -> None:
    assert CLI_OPERATIONS == OFFLINE and set(OFFLINE) <= set(CHAINS)


@pytest.mark.parametrize("operation", ["rollback", "pause", "retry"])
def test_build_plan_plans_only_rows_with_a_chain(operation: str) -> None:
    with pytest.raises(PlanError, match="unknown operation"):
        build_plan({}, [], operation)
