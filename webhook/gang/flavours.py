"""The keys each gang scheduler reads from a member pod, checked against each scheduler's source.

- coscheduling: label `scheduling.x-k8s.io/pod-group`; the size is the PodGroup object's `minMember`.
- volcano: annotations `scheduling.k8s.io/group-name`, `scheduling.volcano.sh/group-min-member`,
  `scheduling.volcano.sh/queue-name`; scheduler `volcano`.
- kueue: label `kueue.x-k8s.io/pod-group-name`, annotation `kueue.x-k8s.io/pod-group-total-count`, label
  `kueue.x-k8s.io/queue-name`; the default scheduler.
- yunikorn: labels `yunikorn.apache.org/app-id`, `yunikorn.apache.org/queue`; annotations
  `yunikorn.apache.org/task-group-name`, `yunikorn.apache.org/task-groups`; scheduler `yunikorn`.
- native: kube-scheduler's own gang scheduling (1.36+): `spec.schedulingGroup.podGroupName` on the pod and a
  `scheduling.k8s.io` PodGroup (`webhook.gang.native`); the default scheduler.
- kubenexus: labels `pod-group.scheduling.kubenexus.io/name`, `pod-group.scheduling.kubenexus.io/min-available`;
  scheduler `kubenexus-scheduler`.

What was checked:
- coscheduling: kubernetes-sigs/scheduler-plugins, `apis/scheduling/v1alpha1/types.go` `PodGroupLabel =
  "scheduling.x-k8s.io/pod-group"` (the `pod-group.scheduling.sigs.k8s.io` label is the pre-v0.24 name); the
  group size is the PodGroup's `spec.minMember`, so no size key exists on the pod.
- volcano: volcano-sh/apis `pkg/apis/scheduling/v1beta1/labels.go`: `KubeGroupNameAnnotationKey =
  "scheduling.k8s.io/group-name"`, `QueueNameAnnotationKey = "scheduling.volcano.sh/queue-name"`; the
  controller's pod-group handling reads `scheduling.volcano.sh/group-min-member` for the group's `minMember`
  (docs/design "Manage & Schedule multiple single pods with podgroup"); scheduler name `volcano`.
- kueue: kubernetes-sigs/kueue, site docs "Run Plain Pods" (pod groups) and `pkg/controller/jobs/pod`: `GroupNameLabel =
  "kueue.x-k8s.io/pod-group-name"`, `GroupTotalCountAnnotation = "kueue.x-k8s.io/pod-group-total-count"`,
  queue label `kueue.x-k8s.io/queue-name` (site docs, "Plain Pods" / "Pod groups"). Kueue gates pods and
  leaves them to the default scheduler.
- yunikorn: apache/yunikorn-k8shim `pkg/common/constants`: labels `yunikorn.apache.org/app-id` and
  `yunikorn.apache.org/queue`, annotations `yunikorn.apache.org/task-group-name` and
  `yunikorn.apache.org/task-groups` (JSON list of `{name, minMember, minResource}`, user guide "Gang
  Scheduling"); the same keys KubeRay's YuniKorn integration writes (ray-operator batchscheduler/yunikorn).
- kubenexus: kube-nexus/kubenexus-scheduler docs/USER_GUIDE.md, "Gang Scheduling": labels
  `pod-group.scheduling.kubenexus.io/name` and `.../min-available`, scheduler `kubenexus-scheduler`.
"""

from dataclasses import dataclass
from typing import Literal

Where = Literal["labels", "annotations"]


@dataclass(frozen=True, slots=True)
class Key:
    """One metadata key on a member pod."""

    where: Where
    name: str


@dataclass(frozen=True, slots=True)
class Flavour:
    name: str
    group: Key
    size: Key | None
    queue: Key | None
    scheduler_name: str | None
    task_groups: bool = False
    """YuniKorn: the size is written as task groups (one per pod template) rather than one number."""
    pod_field: bool = False
    """native: the group is named in the pod's `spec.schedulingGroup` (`webhook.gang.native`); `group` is
    only read, as the name a template may already give its gang."""
    placeholders: bool = False
    """YuniKorn: the scheduler reserves every task group's members with placeholder pods as soon as the first
    pod of the application arrives, so a member made only once another runs (a Spark application's executors)
    can be counted. Every other scheduler holds a gang until `size` members exist (`webhook.gang.members`)."""


YUNIKORN_TASK_GROUP_NAME = Key("annotations", "yunikorn.apache.org/task-group-name")
YUNIKORN_TASK_GROUPS = Key("annotations", "yunikorn.apache.org/task-groups")

FLAVOURS: dict[str, Flavour] = {
    flavour.name: flavour
    for flavour in (
        Flavour("coscheduling", Key("labels", "scheduling.x-k8s.io/pod-group"), None, None, None),
        Flavour(
            "volcano",
            Key("annotations", "scheduling.k8s.io/group-name"),
            Key("annotations", "scheduling.volcano.sh/group-min-member"),
            Key("annotations", "scheduling.volcano.sh/queue-name"),
            "volcano",
        ),
        Flavour(
            "kueue",
            Key("labels", "kueue.x-k8s.io/pod-group-name"),
            Key("annotations", "kueue.x-k8s.io/pod-group-total-count"),
            Key("labels", "kueue.x-k8s.io/queue-name"),
            None,
        ),
        Flavour(
            "yunikorn",
            Key("labels", "yunikorn.apache.org/app-id"),
            None,
            Key("labels", "yunikorn.apache.org/queue"),
            "yunikorn",
            task_groups=True,
            placeholders=True,
        ),
        Flavour("native", Key("labels", "placer.dev/pod-group"), None, None, None, pod_field=True),
        Flavour(
            "kubenexus",
            Key("labels", "pod-group.scheduling.kubenexus.io/name"),
            Key("labels", "pod-group.scheduling.kubenexus.io/min-available"),
            None,
            "kubenexus-scheduler",
        ),
    )
}

OPERATOR_GROUP_LABELS = (
    "spark-app-selector",
    "sparkoperator.k8s.io/app-name",
    "training.kubeflow.org/job-name",
    "ray.io/cluster",
    "jobset.sigs.k8s.io/jobset-name",
    "batch.kubernetes.io/job-name",
    "leaderworkerset.sigs.k8s.io/name",
)
"""Labels operators put on their pods that name the group, in the order docs/gang-scheduling.md gives."""
