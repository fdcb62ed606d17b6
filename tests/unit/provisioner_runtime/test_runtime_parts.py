"""The provisioner runtime's pure parts: slots, avoid-on-retry, ids and options (the worker's core:
test_worker_core.py)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contracts.events import EVENT_TYPES, ProvisionerDeregistered, ProvisionerRegistered, parse_event
from contracts.subjects import TOKEN
from contracts.tasks import TaskMessage
from services.provisioner import entrypoint
from services.provisioner.domain.core import WorkerCore
from services.provisioner.plugins.testing import make_task
from services.provisioner.presence import presence_key
from services.provisioner.routing import drain_subject
from services.provisioner.worker import Slots, WorkerConfig, lets_go


def test_slots_hand_out_the_lowest_free_number() -> None:
    slots = Slots(3)
    assert [slots.take(), slots.take(), slots.take()] == [0, 1, 2]
    assert slots.take() is None and slots.busy == 3
    slots.give(1)
    slots.give(0)
    assert slots.take() == 0 and slots.take() == 1 and slots.take() is None


def test_capacity_is_at_least_one() -> None:
    with pytest.raises(ValueError):
        Slots(0)


def _task(avoid: list[str]) -> TaskMessage:
    return make_task("install", service="s").model_copy(update={"avoid": avoid, "attempt": 2})


@pytest.mark.parametrize(
    ("avoid", "delivery", "passes"),
    [([], 1, False), (["p2"], 1, False), (["p1"], 1, True), (["p1"], 2, True), (["p1"], 3, False), (["p2", "p1"], 2, True)],
)
def test_a_provisioner_named_in_avoid_lets_the_first_deliveries_go(avoid: list[str], delivery: int, passes: bool) -> None:
    config = WorkerConfig(provisioner_id="p1", avoid_deliveries=2)
    assert lets_go(_task(avoid), "p1", delivery, config) is passes


def test_avoid_is_optional_on_the_wire() -> None:
    old = make_task("install", service="s").model_dump(exclude={"avoid"})
    assert TaskMessage.model_validate(old).avoid == []


def test_registration_events_round_trip_and_are_facts() -> None:
    assert {"ProvisionerRegistered", "ProvisionerDeregistered"} <= set(EVENT_TYPES)
    left = ProvisionerDeregistered(provisioner_id="p1", session="s", reason="drained", completed=3)
    assert parse_event(left.model_dump_json()) == left
    assert ProvisionerRegistered.model_fields["provisioner"].is_required()


def test_default_id_is_a_subject_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "build.example.com")
    pid = entrypoint.default_id()
    assert pid.startswith("prov-build-") and TOKEN.fullmatch(pid)
    assert presence_key(pid) == f"provisioner.{pid}"
    assert drain_subject(pid) == f"muster.q.provisioner.{pid}.drain"


def _run_main(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> tuple[Any, dict[str, Any]]:
    seen: dict[str, Any] = {}

    class Registry:
        work_dir = Path("x")

        @classmethod
        def discover(cls, **kw: Any) -> Registry:
            seen.update(kw)
            return cls()

    monkeypatch.setattr(entrypoint, "PluginRegistry", Registry)
    monkeypatch.setattr(entrypoint, "main_for", lambda name, url, setup: seen.setdefault("service", name))
    # Not this process's logging: set up here, the test process's log went to this command's
    # captured stderr for good, and a later test reading its log saw nothing (test_allow_reload).
    monkeypatch.setattr(entrypoint, "configure_logging", lambda service: seen.setdefault("logging", service))
    return CliRunner().invoke(entrypoint.main, args), seen


def test_work_dir_defaults_to_one_per_provisioner_id(monkeypatch: pytest.MonkeyPatch) -> None:
    result, seen = _run_main(monkeypatch, ["--id", "p7"])
    assert result.exit_code == 0, result.output
    assert seen["work_dir"] == Path(".muster/provisioner/p7") and seen["service"] == "provisioner"


def test_work_dir_is_passed_to_the_plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result, seen = _run_main(monkeypatch, ["--id", "p7", "--work-dir", str(tmp_path / "w")])
    assert result.exit_code == 0, result.output
    assert seen["work_dir"] == tmp_path / "w"


@pytest.mark.parametrize(("args", "ahead"), [([], None), (["--claim-ahead", "64"], 64), (["--claim-ahead", "0"], 0)])
def test_claim_ahead_is_an_option(monkeypatch: pytest.MonkeyPatch, args: list[str], ahead: int | None) -> None:
    configs: list[Any] = []
    real = WorkerConfig

    def recorded(**kw: Any) -> Any:
        configs.append(real(**kw))
        return configs[-1]

    monkeypatch.setattr(entrypoint, "WorkerConfig", recorded)
    result, _ = _run_main(monkeypatch, ["--id", "p7", "--capacity", "16", *args])
    assert result.exit_code == 0, result.output
    [config] = configs
    assert config.claim_ahead == ahead
    assert WorkerCore(config).slots.capacity == 16 + (16 if ahead is None else ahead)


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--id", "a.b"], "provisioner id"), (["--tenants", "x>"], "tenant"), (["--tenants", ","], "at least one tenant"),
     (["--presence-ttl", "0"], "presence-ttl"), (["--claim-ahead", "-1"], "claim-ahead")],
)
def test_bad_options_are_refused_by_name(monkeypatch: pytest.MonkeyPatch, args: list[str], message: str) -> None:
    result, seen = _run_main(monkeypatch, args)
    assert result.exit_code == 2 and message in result.output
    assert "service" not in seen
