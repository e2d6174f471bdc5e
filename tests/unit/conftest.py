"""Fixtures shared by the unit tests of the engine's memos."""

from collections.abc import Iterator
from typing import Any

import pytest

from webhook.policy.cel import environment as cel


@pytest.fixture
def evaluated(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The source of every expression the engine evaluates, in order."""
    sources: list[str] = []
    evaluate = cel.evaluate

    def counted(program: cel.Program, bound: Any, **options: Any) -> cel.Result:
        sources.append(program.source)
        return evaluate(program, bound, **options)

    monkeypatch.setattr(cel, "evaluate", counted)
    yield sources
