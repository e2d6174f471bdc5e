"""Would `kubectl placer drift --apply` start a rollout? It writes the merge patch of `judging.write_body`;
what a controller then does with a changed pod template is the kind's own rule:

- Deployment: a new ReplicaSet replaces the pods (the template's hash changes: kubernetes
  pkg/controller/deployment/sync.go, `getNewReplicaSet`), unless the Deployment is paused (`spec.paused`: the
  controller syncs no rollout until it is resumed, pkg/controller/deployment/deployment_controller.go,
  `syncDeployment`);
- StatefulSet and DaemonSet: pods are replaced under `updateStrategy.type: RollingUpdate` (the default), never
  under `OnDelete`, where each pod takes the new template only when it is deleted (API reference,
  StatefulSetUpdateStrategy and DaemonSetUpdateStrategy);
- ReplicaSet: a changed template replaces nothing; pods made from then on take it
  (pkg/controller/replicaset/replica_set.go, `manageReplicas` only creates and deletes by count);
- Job: the pod template is immutable but for a suspended Job's scheduling directives
  (pkg/apis/batch/validation/validation.go, `ValidateJobSpecUpdate`): running pods are left;
- CronJob: its next Jobs take the template; the running ones are left;
- Pod: `drift --apply` never writes one (its scheduling fields are immutable);
- an operator's resource: its operator decides (not counted as a rollout).
"""

from dataclasses import dataclass

from webhook.support.typing import JSONObject, as_map

REPLACING = frozenset({"Deployment", "StatefulSet", "DaemonSet"})


@dataclass(frozen=True, slots=True)
class Rollout:
    starts: bool
    why: str


def rollout(kind: str, stored: JSONObject, body: JSONObject | None) -> Rollout:
    """What writing `body` (the merge patch `drift --apply` sends, None: nothing to write) does to `stored`'s
    pods."""
    if kind == "Pod":
        return Rollout(False, "drift --apply never writes a Pod (its scheduling fields are immutable)")
    if body is None:
        return Rollout(False, "drift --apply writes nothing")
    spec = as_map(stored.get("spec"))
    template_changes = "template" in as_map(body.get("spec")) or "jobTemplate" in as_map(body.get("spec"))
    if not template_changes:
        return Rollout(False, "the pod template does not change")
    if kind == "Deployment":
        if spec.get("paused") is True:
            return Rollout(False, "the Deployment is paused: its pods are replaced when it is resumed")
        return Rollout(True, "the Deployment replaces its pods")
    if kind in REPLACING:
        strategy = str(as_map(spec.get("updateStrategy")).get("type") or "RollingUpdate")
        if strategy == "OnDelete":
            return Rollout(False, f"the {kind} updates OnDelete: each pod takes the change when it is deleted")
        return Rollout(True, f"the {kind} replaces its pods")
    if kind == "ReplicaSet":
        return Rollout(False, "a ReplicaSet replaces no pod: the pods it makes from then on take the change")
    if kind == "Job":
        return Rollout(False, "a Job's running pods are left (only a suspended Job takes scheduling changes)")
    if kind == "CronJob":
        return Rollout(False, "the CronJob's next Jobs take the change; running ones are left")
    return Rollout(False, f"the {kind}'s operator takes the change as it does")
