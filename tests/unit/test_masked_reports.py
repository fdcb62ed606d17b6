"""The suite's reports keep no token's secret (tests/masking.py)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.masking import mask_report, masked

TOKEN = "mst_blind-fdf499_dbf96c2e598b_" + "c37d26fbc5f3928403a30864a45fa9a1d12a93dd0e4f9fbaf8df562333cc4382"


def test_a_tokens_secret_is_cut_where_the_auth_service_cuts_it() -> None:
    assert masked(f"token = '{TOKEN}'") == "token = 'mst_blind-fdf499_dbf96c2e598b_…'"
    assert masked(f"Bearer {TOKEN}\nnext") == "Bearer mst_blind-fdf499_dbf96c2e598b_…\nnext"


def test_a_principal_with_underscores_keeps_its_name() -> None:
    token = "mst_ops_team_0123456789ab_" + "ab" * 32
    assert masked(token) == "mst_ops_team_0123456789ab_…"


def test_text_without_a_token_is_left_as_it_is() -> None:
    text = "assert 'mst_' in name; mst_x_y_short"
    assert masked(text) == text


def test_a_failing_reports_traceback_and_output_are_masked() -> None:
    report = SimpleNamespace(longrepr=f"E   token = '{TOKEN}'", sections=[("Captured stdout call", f"signed in with {TOKEN}")])
    mask_report(report)
    assert TOKEN not in str(report.longrepr) and TOKEN[-64:] not in report.sections[0][1]
    assert "mst_blind-fdf499_dbf96c2e598b_…" in str(report.longrepr)
