"""JSON patches from what the rules did: each template's difference, and the marks on the workload's metadata."""

from collections.abc import Mapping

from webhook.gang.native import JOB_SCHEDULING_MARK, job_scheduling
from webhook.support.patches import diff, unescape
from webhook.support.typing import JSONObject, JSONPatch, as_map
from webhook.workloads import WorkloadKind


def template_patch(kind: WorkloadKind, original: JSONObject, final: JSONObject) -> JSONPatch:
    """Operations turning each template of the original into the final one (templates are all that change)."""
    patch: JSONPatch = []
    for slot in kind.templates(original):
        raw, settled = slot.read(original), slot.read(final)
        if raw is not None and settled is not None and raw is not settled:
            patch.extend(slot.patch(original, raw, slot.view(final, settled)))
    return patch


def marks_patch(obj: JSONObject, marks: Mapping[tuple[str, str], str | None] | None) -> JSONPatch:
    """Operations putting the rules' marks on the workload's own metadata (labels and annotations; nothing
    under the pod template, so no rollout): what the controller reads (`webhook.gang.pod_groups`)."""
    if not marks:
        return []
    marks = dict(marks)
    minimum = marks.pop(JOB_SCHEDULING_MARK, None)
    metadata = as_map(obj.get("metadata"))
    wanted = {part: dict(as_map(metadata.get(part))) for part in ("labels", "annotations")}
    for (part, key), value in marks.items():
        if value is None:
            wanted[part].pop(key, None)
        else:
            wanted[part][key] = value
    patch: JSONPatch = []
    for part, values in wanted.items():
        current = metadata.get(part)
        if not isinstance(current, dict):
            if values:  # no map yet (or null): add it whole, a patch must create parents
                patch.append({"op": "add", "path": f"/metadata/{part}", "value": values})
        elif values != current:
            patch.extend(diff(current, values, f"/metadata/{part}"))
    if minimum is not None:
        patch.extend(_job_scheduling(obj, int(minimum)))
    return patch


def _job_scheduling(obj: JSONObject, minimum: int) -> JSONPatch:
    """The Job's own `spec.scheduling` (a CronJob's job template's), when it has none yet."""
    cronjob = obj.get("kind") == "CronJob"
    spec = as_map(as_map(as_map(obj.get("spec")).get("jobTemplate")).get("spec")) if cronjob else as_map(
        obj.get("spec"))
    if spec.get("scheduling"):
        return []
    where = "/spec/jobTemplate/spec" if cronjob else "/spec"
    return [{"op": "add", "path": f"{where}/scheduling", "value": job_scheduling(minimum)}]



def pointer_tokens(pointer: str) -> tuple[str, ...]:
    if "~" not in pointer:  # nothing escaped: the usual case
        return tuple(pointer.split("/")[1:])
    return tuple(unescape(token) for token in pointer.split("/")[1:])

