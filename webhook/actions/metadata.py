"""`add-node-selector`, `add-labels`, `add-annotations`: merge key/value pairs into a map of the template."""

from collections.abc import Mapping
from typing import Any

from webhook.actions.base import ActionContext, ActionSpec, FreeForm, ensure_map
from webhook.support.names import label_value_error, qualified_name_error
from webhook.support.typing import JSONObject

APPLIED_ANNOTATION = "placer.dev/applied"


def rules_applied(template: Mapping[str, Any]) -> list[str]:
    """The `policy/rule` names a template's `placer.dev/applied` annotation lists, in order."""
    metadata = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    annotations = (metadata or {}).get("annotations")
    applied = annotations.get(APPLIED_ANNOTATION) if isinstance(annotations, dict) else None
    return [rule for rule in str(applied or "").split(",") if rule]


def add_node_selector(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Merge into `spec.nodeSelector`: a node must carry every pair (ANDed with any node affinity)."""
    selector = ensure_map(template, "spec", "nodeSelector")
    changed = False
    for key, value in params.items():
        changed = context.set_scalar(selector, key, value, f"nodeSelector {key}", field=f"spec.nodeSelector[{key}]",
                                     path=("spec", "nodeSelector", key)) or changed
    return changed


def add_labels(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Merge into the template's labels, never changing a label the controller's selector relies on."""
    labels = ensure_map(template, "metadata", "labels")
    allowed = {key: value for key, value in params.items() if not context.keeps_label(labels, key, value)}
    return _merge(labels, allowed, context, "label")


def add_annotations(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    """Merge into the template's annotations."""
    return _merge(ensure_map(template, "metadata", "annotations"), params, context, "annotation")


def _merge(target: JSONObject, pairs: Mapping[str, Any], context: ActionContext, what: str) -> bool:
    changed = False
    for key, value in pairs.items():
        changed = context.set_scalar(target, key, value, f"{what} {key}") or changed
    return changed


LABEL_PAIRS = FreeForm(key_check=qualified_name_error, value_check=label_value_error)

SPECS = (
    ActionSpec(name="add-node-selector", apply=add_node_selector, free_form=LABEL_PAIRS),
    ActionSpec(name="add-labels", apply=add_labels, free_form=LABEL_PAIRS),
    ActionSpec(
        name="add-annotations",
        apply=add_annotations,
        free_form=FreeForm(key_check=qualified_name_error, value_check=None, reserved_keys=(APPLIED_ANNOTATION,)),
    ),
)
