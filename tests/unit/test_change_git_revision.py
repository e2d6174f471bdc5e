"""`placer diff --base REV`: policy paths read at a git revision (`webhook.change.git_revision`), and the
test cases a change breaks (`broken_suites`), on a real git repository made for the test."""

import subprocess
from pathlib import Path

import pytest

from webhook.change.git_revision import RevisionError, policies_at
from webhook.commands.cli import main


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "policies" / "nested").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "policies" / "gpu.yaml").write_text("old gpu\n")
    (repo / "policies" / "web.yml").write_text("old web\n")
    (repo / "policies" / "README.md").write_text("not a policy\n")
    (repo / "policies" / "nested" / "deep.yaml").write_text("not read: a subdirectory\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    (repo / "policies" / "gpu.yaml").write_text("new gpu\n")
    (repo / "policies" / "added.yaml").write_text("new file\n")
    return repo


def test_a_file_and_a_directory_are_read_at_the_revision(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    [directory] = policies_at("HEAD", [str(repo / "policies")], out)
    assert sorted(path.name for path in Path(directory).iterdir()) == ["gpu.yaml", "web.yml"]
    assert (Path(directory) / "gpu.yaml").read_text() == "old gpu\n"
    [single] = policies_at("HEAD", [str(repo / "policies" / "gpu.yaml")], tmp_path / "single")
    assert Path(single).read_text() == "old gpu\n"


def test_clear_errors(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(RevisionError, match=r"policies/added.yaml: did not exist at HEAD \(git ls-tree HEAD"):
        policies_at("HEAD", [str(repo / "policies" / "added.yaml")], tmp_path / "x")
    with pytest.raises(RevisionError, match="nope: not a revision of the git repository"):
        policies_at("nope", [str(repo / "policies")], tmp_path / "x")
    with pytest.raises(RevisionError, match="a revision cannot start with '-'"):
        policies_at("--output=/tmp/x", [str(repo / "policies")], tmp_path / "x")
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    with pytest.raises(RevisionError, match="not-a-repo: not in a git repository"):
        policies_at("main", [str(elsewhere)], tmp_path / "x")


POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: gpu-pool}}
spec:
  rules:
  - {{name: pool, action: add-node-selector, parameters: {{node-pool: {pool}}}}}
"""
SUITE = """apiVersion: placer.dev/v1alpha1
kind: PolicyTest
metadata: {name: gpu-pool}
policies: [../policies]
resources: [../app.yaml]
results:
- resource: Deployment/web
  expected: {spec: {template: {spec: {nodeSelector: {node-pool: gpu}}}}}
- resource: Deployment/web
  applied: [gpu-pool/pool]
"""
APP = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
"""


def test_diff_at_a_revision_names_the_case_it_breaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    (repo / "policies").mkdir(parents=True)
    (repo / "tests").mkdir()
    git(repo, "init", "-q")
    (repo / "policies" / "gpu.yaml").write_text(POLICY.format(pool="gpu"))
    (repo / "tests" / "gpu-test.yaml").write_text(SUITE)
    (repo / "app.yaml").write_text(APP)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    (repo / "policies" / "gpu.yaml").write_text(POLICY.format(pool="gpu2"))
    monkeypatch.chdir(repo)
    code = main(["diff", "--base", "HEAD", "--policies", "policies", "-f", "app.yaml", "--suites", "tests"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.startswith("policy change: replaces gpu-pool (old: policies at HEAD)\n")
    assert "test cases the change breaks:\n  tests/gpu-test.yaml: results[0] Deployment/web\n" in out
    assert "results[1]" not in out, "a case that passes with both is not named"
    assert out.endswith("1 manifest changes, 0 would be stranded, 1 test case would break (of 1 manifest)\n")
    code = main(["diff", "--base", "HEAD", "--policies", "policies/missing.yaml", "-f", "app.yaml"])
    assert code == 2
    assert "policies/missing.yaml: did not exist at HEAD" in capsys.readouterr().err
