from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.pools import HostProperties
from services.pool.domain.matching import RequirementError, Signature, fit, parse_requirement, signature


def sig(**props: object) -> Signature:
    return signature(HostProperties.model_validate(props))


BIG = sig(cpu=16, memory="64G", labels=["ssd", "gpu"], extra={"arch": "x86_64", "zone": 2})
SMALL = sig(cpu=2, memory=4096, labels=["hdd"])


@pytest.mark.parametrize("text,big,small", [
    ("", True, True),
    ("cpu >= 8", True, False),
    ("cpu>=8,labels contains ssd", True, False),
    ("cpu < 8", False, True),
    ("cpu == 2", False, True),
    ("cpu = 2", False, True),
    ("cpu != 2", True, False),
    ("memory >= 16G", True, False),
    ("memory <= 4096", False, True),
    ("memory >= 4G, memory < 5G", False, True),
    ("labels contains gpu", True, False),
    ("labels !contains gpu", False, True),
    ("arch == x86_64", True, False),
    ("arch != arm64", True, False),  # small has no 'arch': a missing property never fits
    ("zone >= 2", True, False),
])
def test_requirements_select_the_hosts_they_name(text: str, big: bool, small: bool) -> None:
    r = parse_requirement(text)
    assert (r.fits(BIG), r.fits(SMALL)) == (big, small)


@pytest.mark.parametrize("text,message", [
    ("cpu >> 8", "is not '<property> <operator> <value>'"),
    ("cpu >= lots", "cpu is compared with a number"),
    ("labels >= 3", "labels take only 'contains' or '!contains'"),
    ("cpu contains 3", "only labels take 'contains'"),
    ("memory >= 16Q", "memory '16Q' is not a size"),
    ("arch > x86", "a word is compared only with == or !="),
    ("cpu >= 8,, labels contains ssd", "clause 2 ''"),
    ("CPU >= 8", "clause 1 'CPU >= 8'"),
])
def test_malformed_requirements_are_refused_naming_the_clause(text: str, message: str) -> None:
    with pytest.raises(RequirementError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_requirement(text)


def test_canonical_text_is_the_same_for_equivalent_spellings() -> None:
    assert parse_requirement("cpu>=8 ,labels contains ssd").text == parse_requirement(" cpu >= 8, labels contains ssd ").text
    assert parse_requirement("memory >= 1G").text == "memory >= 1024"


def test_fit_serves_the_most_constrained_need_first() -> None:
    # 'any' could take the big host greedily and leave 'cpu >= 8' without one.
    plan = fit({"": 1, "cpu >= 8": 1}, {BIG: 1, SMALL: 1})
    assert plan == {"": {SMALL: 1}, "cpu >= 8": {BIG: 1}}


def test_fit_reroutes_when_the_greedy_first_pass_is_not_enough() -> None:
    # Greedy: 'cpu >= 8' takes the 8-cpu host, 'cpu < 8' takes a plain 2-cpu host, and
    # '!ssd' (2) is one short. The flow moves 'cpu < 8' to the ssd host instead.
    plain2, plain8, ssd2 = sig(cpu=2), sig(cpu=8), sig(cpu=2, labels=["ssd"])
    needs = {"cpu >= 8": 1, "cpu < 8": 1, "labels !contains ssd": 2}
    plan = fit(needs, {plain2: 2, plain8: 1, ssd2: 1})
    assert plan == {"cpu >= 8": {plain8: 1}, "cpu < 8": {ssd2: 1}, "labels !contains ssd": {plain2: 2}}


def test_fit_says_none_when_hosts_are_short_or_do_not_fit() -> None:
    assert fit({"cpu >= 8": 2}, {BIG: 1, SMALL: 5}) is None
    assert fit({"": 3}, {BIG: 1, SMALL: 1}) is None
    assert fit({}, {}) == {}


SIGS = [sig(cpu=c, labels=labels) for c, labels in [(16, ["ssd"]), (8, ["ssd"]), (8, []), (2, ["ssd"]), (2, [])]]
REQS = ["cpu >= 8", "labels contains ssd", "cpu >= 16", "cpu < 8", "", "labels !contains ssd"]


def _brute(needs: dict[str, int], free: dict[object, int]) -> bool:
    units = [r for r, n in needs.items() for _ in range(n)]
    left = dict(free)

    def place(i: int) -> bool:
        if i == len(units):
            return True
        for s in left:
            if left[s] and parse_requirement(units[i]).fits(s):  # type: ignore[arg-type]
                left[s] -= 1
                if place(i + 1):
                    return True
                left[s] += 1
        return False

    return place(0)




@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(REQS), st.integers(1, 3), min_size=1, max_size=4),
       st.dictionaries(st.sampled_from(SIGS), st.integers(0, 3), max_size=5))
def test_fit_finds_an_assignment_exactly_when_one_exists(needs: dict[str, int], free: dict[object, int]) -> None:
    plan = fit(needs, free)  # type: ignore[arg-type]
    assert (plan is not None) == _brute(needs, free)
    if plan is not None:
        for r, by_sig in plan.items():
            assert sum(by_sig.values()) == needs[r]
            assert all(parse_requirement(r).fits(s) for s in by_sig)
        for s, n in free.items():
            assert sum(p.get(s, 0) for p in plan.values()) <= n  # type: ignore[call-overload]
