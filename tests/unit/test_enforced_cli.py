"""Issue 48's escapes tried offline as a tenant would, with `placer apply` and the shipped example policy:
each is refused (exit 1, the refusal on stderr) or placed, and an exempt user's workload reaches its pods."""

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from webhook.commands.cli import main

ESCAPES = REPO / "docs/examples/enforced-policies/escapes"
POLICY = ["--policies", str(REPO / "policies/enforced-team-pool.yaml"), "--namespace-labels", "tenant=team-a"]
KEY = ["--exemption-key", str(ESCAPES / "example-exemption.key")]


def apply(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["apply", *POLICY, *args])
    out, err = capsys.readouterr()
    return status, out, err


def files(*names: str) -> list[str]:
    return [part for name in names for part in ("-f", str(ESCAPES / name))]


def test_forged_marks_forged_controllers_self_exemption_and_pinned_templates(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = apply(capsys, *files("create.yaml"), "-o", "yaml")
    assert status == 1
    assert "replicasets \"forged-controller\" is forbidden" in err
    assert 'pods "self-exempt" is forbidden' in err
    assert 'deployments "pinned" is forbidden' in err and "spec.template.spec.nodeName" in err
    assert "forged-marks" not in err, "placed, not refused: it gets the pool's selector"
    assert "node-pool: general" in out.split("name: forged-marks")[1].split("---")[0]


@pytest.mark.parametrize(("old", "new", "refusal"), [
    ("pending-pod.yaml", "pending-pod-tolerates-all.yaml", 'pods "pending" is forbidden'),
    ("suspended-job.yaml", "suspended-job-moved.yaml", 'jobs "train" is forbidden'),
])
def test_updates_that_bring_a_way_out_are_refused(capsys: pytest.CaptureFixture[str], old: str, new: str,
                                                 refusal: str) -> None:
    status, _, err = apply(capsys, "--operation", "UPDATE", "--old", str(ESCAPES / old), *files(new))
    assert status == 1 and refusal in err
    status, out, _ = apply(capsys, "--operation", "UPDATE", "--old", str(ESCAPES / old), *files(old), "-o", "patch")
    assert status == 0 and json.loads(out)[0]["patch"] == [], "an update Placer does not care about: no patch"


def test_an_exempt_users_workload_reaches_its_pods_and_a_copy_does_not(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = apply(capsys, "--as", "alice", "--as-group", "platform-admins", *KEY,
                             *files("platform-agent.yaml"))
    assert status == 0 and "kept (wanted 'general')" in err
    assert "placer.dev/exempt: v1.RwOlskuTEkS1PUCrRJQEudYdyZol8nutStyUOhqvd0k" in out
    status, _, err = apply(capsys, "--as", "system:serviceaccount:kube-system:replicaset-controller", *KEY,
                           *files("platform-agent-pods.yaml"))
    assert status == 0, err
    status, _, err = apply(capsys, "--as", "system:serviceaccount:kube-system:replicaset-controller",
                           *files("platform-agent-pods.yaml"))
    assert status == 1, "without the key the exemption stays with the request"
    status, _, err = apply(capsys, "--as", "bob", *KEY, *files("tenant-copy.yaml"))
    assert status == 1 and 'pods "miner" is forbidden' in err
    status, _, err = apply(capsys, "--as", "bob", *files("platform-agent.yaml"))
    assert status == 1 and 'deployments "gpu-exporter" is forbidden' in err
    short = tmp_path / "short.key"
    short.write_text("too short")
    assert main(["apply", *POLICY, "--exemption-key", str(short), *files("platform-agent.yaml")]) == 2
    assert "an exemption key needs at least 32" in capsys.readouterr().err
