"""What a job page says after a form (`?said=...&seal=...`) is sealed with the session, the tenant
and the job (services/tracker/csrf.py): a link someone else made shows nothing (docs/security.md)."""

from __future__ import annotations

from services.tracker import csrf

JOB, OTHER = "7f0c3c1e-0000-4000-8000-000000000001", "7f0c3c1e-0000-4000-8000-000000000002"


def test_a_seal_opens_only_its_own_session_tenant_job_and_words() -> None:
    seal = csrf.seal("mst_ann_1_secret", "acme", JOB, "approved")
    assert csrf.sealed("mst_ann_1_secret", "acme", JOB, "approved", seal)
    assert not csrf.sealed("mst_bea_2_secret", "acme", JOB, "approved", seal)  # made in another browser
    assert not csrf.sealed("mst_ann_1_secret", "beta", JOB, "approved", seal)
    assert not csrf.sealed("mst_ann_1_secret", "acme", OTHER, "approved", seal)
    assert not csrf.sealed("mst_ann_1_secret", "acme", JOB, "rejected", seal)
    assert not csrf.sealed("mst_ann_1_secret", "acme", JOB, "approved", None)
    assert not csrf.sealed("mst_ann_1_secret", "acme", JOB, "approved", "")
    assert seal != csrf.token_for("mst_ann_1_secret", "acme")  # a form's CSRF token seals nothing
