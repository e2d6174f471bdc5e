"""The policy set after a change (`policy_change`), and whether bringing a workload in step rolls it out
(`rollout`)."""

from pathlib import Path

import pytest

from webhook.admission.offline import load_policies
from webhook.change.policy_change import ChangeError, change_policies
from webhook.change.rollout import rollout

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: {name}}}
spec:
  rules:
  - {{name: pool, action: add-node-selector, parameters: {{node-pool: {pool}}}}}
"""


def policies(tmp_path: Path, name: str, *pairs: tuple[str, str]) -> list[str]:
    path = tmp_path / name
    path.write_text("---\n".join(POLICY.format(name=policy, pool=pool) for policy, pool in pairs))
    return [str(path)]


def test_given_policies_add_replace_and_deletions_remove(tmp_path: Path) -> None:
    before = load_policies(policies(tmp_path, "before.yaml", ("a", "x"), ("b", "x"), ("c", "x")), required=True)
    given = load_policies(policies(tmp_path, "given.yaml", ("a", "x"), ("b", "y"), ("d", "x")), required=True)
    change = change_policies(before, given, ["c"])
    assert (change.added, change.replaced, change.deleted) == (("d",), ("b",), ("c",))
    assert change.describe() == "adds d; replaces b; deletes c"
    assert [policy.name for policy in change.after.policies] == ["a", "b", "d"]
    assert next(p for p in change.after.policies if p.name == "b").rules[0].parameters == {"node-pool": "y"}


def test_a_deletion_must_name_an_existing_policy_not_also_given(tmp_path: Path) -> None:
    before = load_policies(policies(tmp_path, "before.yaml", ("a", "x")), required=True)
    with pytest.raises(ChangeError, match="--delete b: there is no SchedulingPolicy b to delete \\(there are: a\\)"):
        change_policies(before, before, ["b"])
    with pytest.raises(ChangeError, match="--delete a: policy a is also among the given policies"):
        change_policies(before, before, ["a"])


@pytest.mark.parametrize(("kind", "spec", "starts", "why"), [
    ("Deployment", {}, True, "the Deployment replaces its pods"),
    ("Deployment", {"paused": True}, False, "the Deployment is paused: its pods are replaced when it is resumed"),
    ("StatefulSet", {"updateStrategy": {"type": "RollingUpdate"}}, True, "the StatefulSet replaces its pods"),
    ("StatefulSet", {"updateStrategy": {"type": "OnDelete"}}, False,
     "the StatefulSet updates OnDelete: each pod takes the change when it is deleted"),
    ("DaemonSet", {}, True, "the DaemonSet replaces its pods"),
    ("ReplicaSet", {}, False, "a ReplicaSet replaces no pod: the pods it makes from then on take the change"),
    ("Job", {}, False, "a Job's running pods are left (only a suspended Job takes scheduling changes)"),
    ("PyTorchJob", {}, False, "the PyTorchJob's operator takes the change as it does"),
])
def test_a_template_change_rolls_out_as_the_kind_does(kind: str, spec: dict[str, object], starts: bool,
                                                      why: str) -> None:
    decided = rollout(kind, {"spec": spec}, {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}})
    assert (decided.starts, decided.why) == (starts, why)


def test_no_write_or_no_template_change_rolls_nothing_out() -> None:
    assert rollout("Deployment", {"spec": {}}, None).why == "drift --apply writes nothing"
    assert rollout("Deployment", {"spec": {}}, {"metadata": {"labels": {"a": "b"}}}).why == (
        "the pod template does not change")
    assert not rollout("Pod", {"spec": {}}, {"spec": {"nodeSelector": {}}}).starts
    assert rollout("CronJob", {"spec": {}}, {"spec": {"jobTemplate": {}}}).why == (
        "the CronJob's next Jobs take the change; running ones are left")
