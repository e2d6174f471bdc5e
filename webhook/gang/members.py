"""Who a label-based gang counts: with most gang schedulers, only the pods that exist before any must run.

Four of the schedulers Placer labels pods for hold every member of a gang until `size` members exist:

- scheduler-plugins coscheduling: `PreFilter` refuses a member while fewer pods carry the group's label than
  the PodGroup's `minMember` (kubernetes-sigs/scheduler-plugins pkg/coscheduling/core/core.go,
  `PodGroupManager.PreFilter`: "cannot find enough sibling pods");
- Volcano: the gang plugin keeps a job from being scheduled while it has fewer valid tasks than its PodGroup's
  `minMember` (volcano-sh/volcano pkg/scheduler/plugins/gang/gang.go, `validJobFn`: "Not enough valid tasks
  for gang-scheduling");
- Kueue: no Workload is made for a pod group, so none of its pods is admitted, until
  `kueue.x-k8s.io/pod-group-total-count` pods exist (kueue site docs, Troubleshooting Pods, "Why doesn't a
  Workload exist for my Pod group?");
- KubeNexus: `PreFilter` refuses a member while fewer pods carry the group's name label than its
  `min-available` (kube-nexus/kubenexus-scheduler pkg/plugins/coscheduling/coscheduling.go).

A pod its operator makes only once another member runs can therefore never be counted: a Spark driver in its
executors' gang waits for executors that only the running driver creates. The pods counted are the ones
kube-scheduler's own gang counts, for the same reason (`webhook.gang.native_members.counted_pods`: a Spark
application's executors, an MPIJob's workers under `WaitForWorkersReady`, a Ray cluster's head and
`minReplicas` under autoscaling); a template left out gets its scheduler and queue, not the gang's keys.
YuniKorn differs: it creates placeholder pods for every task group as soon as the application's first pod
arrives (`Flavour.placeholders`), which is how the Spark operator's own YuniKorn integration puts the driver
and the executors in one application (kubeflow/spark-operator internal/scheduler/yunikorn/scheduler.go,
`Schedule`: task groups `spark-driver`, minMember 1, and `spark-executor`).
"""

from webhook.gang.facts import GangFacts
from webhook.gang.flavours import Flavour
from webhook.gang.native import NATIVE
from webhook.gang.native_members import SPARK_ROLE_LABEL, left_out


def waits_for_members(flavour: Flavour) -> bool:
    """The scheduler holds a gang until its members exist (every label-based one but YuniKorn)."""
    return flavour.name != NATIVE and not flavour.placeholders


def left_out_of_gang(flavour: Flavour, facts: GangFacts, template: str) -> str | None:
    """Why the pods of `template` must not carry the gang's group and size, or None when they are members."""
    if not waits_for_members(flavour):
        return None
    if facts.kind == "Pod":
        labels = facts.templates[0].labels if facts.templates else {}
        if labels.get(SPARK_ROLE_LABEL) == "driver":
            return "a Spark driver is not in its application's gang: it creates the executors once it runs"
        return None
    if facts.uncounted is not None:
        return facts.uncounted
    if facts.counted is not None and facts.counted.get(template, 0) < 1:
        return left_out(facts.kind, template)
    return None


def counted_size(flavour: Flavour, facts: GangFacts) -> int | None:
    """The gang's size where it counts only some pods (`GangFacts.counted`), else None (the workload's own)."""
    if not waits_for_members(flavour) or facts.counted is None or facts.kind == "Pod":
        return None
    return sum(facts.counted.values())
