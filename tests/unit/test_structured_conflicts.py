"""Conflicts are structured (field, wanted, found) where they decide placement, so the engine refuses on them
without reading the message; the others stay messages."""

from typing import Any

import pytest

from webhook.actions.affinity import satisfiable
from webhook.actions.base import ActionContext, Conflict
from webhook.actions.registry import action_specs

SPECS = action_specs()


def conflicts(action: str, spec: dict[str, Any], params: dict[str, Any], **context: Any) -> list[Conflict]:
    template: dict[str, Any] = {"metadata": {"labels": {"app": "web"}, "annotations": {"team": "a"}}, "spec": spec}
    acting = ActionContext(False, None, frozenset(context.get("protected", ())))
    SPECS[action].apply(template, params, acting)
    return acting.conflicts


@pytest.mark.parametrize(("action", "spec", "params", "expected"), [
    ("add-node-selector", {"nodeSelector": {"node-pool": "shared"}}, {"node-pool": "general"},
     ("spec.nodeSelector[node-pool]", "general", "shared", ("spec", "nodeSelector", "node-pool"))),
    ("set-scheduler-name", {"schedulerName": "volcano"}, {"schedulerName": "yunikorn"},
     ("spec.schedulerName", "yunikorn", "volcano", ("spec", "schedulerName"))),
    ("set-priority-class", {"priorityClassName": "high"}, {"priorityClassName": "low"},
     ("spec.priorityClassName", "low", "high", ("spec", "priorityClassName"))),
])
def test_placement_conflicts_carry_field_wanted_found(
        action: str, spec: dict[str, Any], params: dict[str, Any], expected: tuple[Any, ...]) -> None:
    (conflict,) = conflicts(action, spec, params)
    assert conflict.refusable
    assert (conflict.field, conflict.wanted, conflict.found, conflict.path) == expected


def test_other_conflicts_are_messages_only() -> None:
    (conflict,) = conflicts("add-labels", {}, {"app": "other"}, protected={"app"})
    assert not conflict.refusable and str(conflict) == "label app is used by the workload's selector, kept"
    (annotation,) = conflicts("add-annotations", {}, {"team": "b"})
    assert not annotation.refusable and str(annotation) == "annotation team is 'a', kept (wanted 'b')"


@pytest.mark.parametrize(("requirements", "holds"), [
    ([{"operator": "In", "values": ["a"]}, {"operator": "In", "values": ["b"]}], False),
    ([{"operator": "In", "values": ["a", "b"]}, {"operator": "In", "values": ["b"]}], True),
    ([{"operator": "In", "values": ["a"]}, {"operator": "NotIn", "values": ["a"]}], False),
    ([{"operator": "Exists"}, {"operator": "DoesNotExist"}], False),
    ([{"operator": "NotIn", "values": ["a"]}, {"operator": "DoesNotExist"}], True),
    ([{"operator": "Gt", "values": ["3"]}, {"operator": "In", "values": ["7"]}], True),
])
def test_requirements_on_one_key_hold_together_or_not(requirements: list[dict[str, Any]], holds: bool) -> None:
    assert satisfiable(requirements) is holds
