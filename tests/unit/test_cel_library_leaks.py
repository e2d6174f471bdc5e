"""What Kubernetes' CEL library calls leak is counted, and the count never under-states what leaks.

cel-expr-python 0.1.3 keeps every argument tuple (and what is in it) it builds for a Python function. The
leaked objects are Python objects, so tracemalloc sees them: the account must be at least what tracemalloc
measures, and not wildly more (a worker recycled far too often would cost latency for nothing).
"""

import gc
import tracemalloc

import pytest

from webhook.policy.cel import environment as cel
from webhook.policy.cel.libraries.leaks import LeakAccount

CALLS = 3000


def _measure(expression: str, data: dict[str, object]) -> tuple[int, int]:
    """(bytes counted, bytes tracemalloc saw kept) over CALLS evaluations."""
    account = LeakAccount()
    environment = cel.new_environment(account)
    program = cel.compile_expression(environment, expression)
    for _ in range(200):  # warm up caches (compiled patterns, interned strings)
        cel.evaluate(program, cel.activation(environment, data))
    counted_before = account.leaked
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(CALLS):
            assert cel.evaluate(program, cel.activation(environment, data)).error is None
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    kept = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return account.leaked - counted_before, kept


@pytest.mark.parametrize("expression", [
    "object.name.find('[0-9]+') == '42'",
    "object.names.indexOf('b') == 1",
    "object.names.isSorted()",
    "isQuantity(object.memory)",
    "url(object.link).getQuery()['k'][0] == 'v'",
])
def test_the_account_covers_what_python_functions_leave_behind(expression: str) -> None:
    counted, kept = _measure(expression, {"object": {
        "name": "build-42", "names": ["a", "b", "c"], "memory": "512Mi", "link": "https://x.example/p?k=v"}})
    assert kept > 0, "cel-expr-python no longer leaks: the account (and worker recycling) can go"
    assert counted >= kept
    assert counted <= 4 * kept


def test_a_literal_call_is_resolved_at_load_and_costs_nothing() -> None:
    counted, _ = _measure("quantity('1Gi') == quantity('1024Mi')", {"object": {}})
    assert counted == 0


def test_the_account_is_exhausted_at_its_budget_drawn_with_jitter() -> None:
    budgets = {LeakAccount(budget_bytes=1_000_000).budget for _ in range(20)}
    assert all(750_000 <= budget <= 1_000_000 for budget in budgets if budget is not None)
    assert len(budgets) > 1
    account = LeakAccount(budget_bytes=10_000, jitter=0)
    environment = cel.new_environment(account)
    program = cel.compile_expression(environment, "quantity(object.memory).isGreaterThan(quantity('1Gi'))")
    calls = 0
    while not account.exhausted():
        cel.evaluate(program, cel.activation(environment, {"object": {"memory": "2Gi"}}))
        calls += 1
    assert 3 <= calls <= 20
    assert not LeakAccount().exhausted()
