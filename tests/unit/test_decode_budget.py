"""The decode budget: what a body is estimated to cost, which bodies reserve it, which are refused."""

import json

import pytest

from tests.conftest import fixture_request
from webhook.server.decode_budget import (
    _MOST_PER_BYTE,
    COST_FACTOR,
    MIB,
    BudgetLimits,
    DecodeBudget,
    DecodeRefused,
    estimate,
)

CAPTURED = json.dumps(fixture_request("deployment-create-dryrun")).encode()


@pytest.mark.parametrize("body", [b"{" * 1000, b"[" * 1000, b"," * 1000, b"x" * 1000, b'{"a":[1,2],"b":{}}', CAPTURED])
def test_no_body_is_estimated_above_its_length_times_the_costliest_byte(body: bytes) -> None:
    """What lets a short body skip the count: the bound must hold for every shape of body."""
    assert estimate(body) <= len(body) * _MOST_PER_BYTE


def test_an_ordinary_review_reserves_nothing_and_a_large_one_holds_its_estimate_while_used() -> None:
    budget = DecodeBudget(BudgetLimits(worker_total=64 * MIB, small=1 * MIB, trim_after=64 * MIB))
    with budget.reserve(CAPTURED, None):
        assert budget.in_use == 0
    large = b"[" + b"{}," * 20_000 + b"{}]"
    with budget.reserve(large, None):
        assert budget.in_use == estimate(large) * COST_FACTOR
    assert budget.in_use == 0


def test_a_body_costlier_than_the_whole_budget_is_refused_even_when_short() -> None:
    """The short-body shortcut compares with the smaller of the two limits: a budget configured below
    `small` still refuses what it cannot hold."""
    budget = DecodeBudget(BudgetLimits(worker_total=1 * MIB, small=8 * MIB))
    dense = b"{" * 5_000  # estimated 3.2 MB: under `small`, over the whole budget
    with pytest.raises(DecodeRefused) as refused, budget.reserve(dense, None):
        pass
    assert refused.value.status == 413
    with budget.reserve(b"{" * 100, None):
        assert budget.in_use == 0
