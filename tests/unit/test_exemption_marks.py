"""An admission exempt by its author says so on the workload, for the reports; any other admission removes it."""

from tests.helpers import run, snapshot_of
from tests.unit.test_enforced_policies import SHARED, TEAM_A, deployment, policy, review

EXEMPT = policy(exemptions="  exemptions: {groups: [platform-admins], namespaces: [ops]}\n")
ADMIN = {"username": "alice", "groups": ["platform-admins"]}
TENANT = {"username": "bob", "groups": ["team-a"]}
MARK = "/metadata/annotations/placer.dev~1exempt"


def test_an_exempt_groups_workload_carries_the_exemption() -> None:
    mutation = run(snapshot_of(EXEMPT, namespaces=[TEAM_A]), review(deployment(SHARED), user=ADMIN))
    assert mutation.denial is None
    added = [op for op in mutation.patch if op["path"].startswith("/metadata/annotations")]
    assert added == [{"op": "add", "path": "/metadata/annotations",
                      "value": {"placer.dev/exempt": "boundary: group platform-admins is exempt"}}]


def test_a_mark_brought_by_anyone_not_exempt_is_removed_and_refuses_nothing_less() -> None:
    forged = deployment({})
    forged["metadata"]["annotations"] = {"placer.dev/exempt": "boundary: group platform-admins is exempt"}
    mutation = run(snapshot_of(EXEMPT, namespaces=[TEAM_A]), review(forged, user=TENANT))
    assert {"op": "remove", "path": MARK} in mutation.patch
    forged["spec"]["template"]["spec"].update(SHARED)
    assert run(snapshot_of(EXEMPT, namespaces=[TEAM_A]), review(forged, user=TENANT)).denial is not None


def test_nothing_is_marked_without_an_exemption_by_author() -> None:
    mutation = run(snapshot_of(EXEMPT, namespaces=[TEAM_A]), review(deployment({}), user=TENANT))
    assert not any(op["path"].startswith("/metadata/annotations") for op in mutation.patch)
