"""A native gang over a workload's life: when one may be added, and how big it may stay.

kube-scheduler counts a PodGroup's members among the pods it knows (`PreEnqueue` waits for `minCount` of
them, `AllPodsCount`) and lets them bind once `minCount` are placed at once (`Permit`, `ScheduledPodsCount`:
kubernetes/kubernetes `pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go`). It knows no pod
that has finished: its pod informer lists only pods whose phase is neither Succeeded nor Failed
(`pkg/scheduler/scheduler.go`, `newPodInformer`), and a pod that leaves it is deleted from its group's state
(`pkg/scheduler/backend/cache/podgroupstate.go`, `deletePod`). Two consequences:

- **A gang is never added to a workload whose pods already run** (`joins_running`). A rolling update
  replaces the old pods one at a time: the first new pod names a group the old pods are not in, so it alone
  can never make `minCount`, and the rollout stops there. Only a workload whose every pod is replaced at
  once may gain one on an update: a Deployment with `strategy.type: Recreate` (every old pod is gone before
  the new ReplicaSet is scaled up at once: `pkg/controller/deployment/recreate.go`, `rolloutRecreate`), and a
  CronJob (each run after the update is a new Job whose pods are all made together). A Job's template is
  immutable, so a Job never gains one after its creation.
- **`minCount` follows what can still run** (`webhook.gang.native.pods_still_to_run`): once some of a Job's
  pods have succeeded they leave the scheduler's count, and a pod made after that (a failed pod's replacement, the next
  completion of a Job with `completions` > `parallelism`) could never see `minCount` members again. The
  controller lowers the PodGroup's `minCount` to the pods the Job can still run
  (`webhook.cluster.podgroups.native_gang`), as it follows a scale of the other workloads.
"""

from collections.abc import Mapping
from typing import Any

from webhook.gang.native import NATIVE, POD_GROUP_API_ANNOTATION, scheduling_group
from webhook.gang.pod_groups import POD_GROUP_LABEL
from webhook.support.typing import as_map
from webhook.workloads import WorkloadKind

REPLACED_ONE_BY_ONE = {
    "Deployment": "its rolling update replaces the running pods a few at a time",
    "StatefulSet": "it replaces its running pods one at a time",
    "ReplicaSet": "it keeps its running pods and makes new ones only to replace or add pods",
    "DaemonSet": "it replaces its running pods node by node",
}


def joins_running(kind: WorkloadKind, obj: Mapping[str, Any], old: Mapping[str, Any] | None, *,
                  stored: bool) -> str | None:
    """Why a native gang must not be added now, or None. `old`: the object before an UPDATE; `stored`: the
    object is a stored workload judged as its creation (reports, `drift --apply`), whose pods may run."""
    if old is None and not stored:
        return None  # a creation: no pod of it exists yet
    if kind.kind in ("Job", "Pod", "CronJob"):
        return None  # a Job's template is immutable; a CronJob's next runs are new Jobs
    previous = old if old is not None else obj
    if _ganged(kind, previous):
        return None  # its pods already name the group: nothing new for them to wait for
    if kind.kind == "Deployment" and as_map(as_map(obj.get("spec")).get("strategy")).get("type") == "Recreate":
        return None
    how = REPLACED_ONE_BY_ONE.get(kind.kind, f"its operator replaces or adds pods while others of the {kind.kind} "
                                              "run")
    return (f"the {kind.kind}'s pods already run without the gang, and {how}: a new pod would wait for a "
            "gang the running pods never join. Admitted without it; the gang applies to a workload created "
            "with the policy in place" + (", or a Deployment with strategy Recreate" if kind.kind == "Deployment"
                                           else ""))


def _ganged(kind: WorkloadKind, obj: Mapping[str, Any]) -> bool:
    """Whether the workload's pods already name a native group: a template naming one, or (an operator
    resource, whose pods name it at their creation) Placer's marks on the object."""
    metadata = as_map(obj.get("metadata"))
    if as_map(metadata.get("annotations")).get(POD_GROUP_API_ANNOTATION) == NATIVE and \
            as_map(metadata.get("labels")).get(POD_GROUP_LABEL):
        return True
    return any(scheduling_group(raw) is not None for slot in kind.templates(dict(obj))
               if (raw := slot.read(dict(obj))) is not None)
