"""`placer diff` golden cases: each directory of tests/golden/diff holds the old policies (`old/`), the new
(`new/`), the manifests (Namespaces and Nodes among them), `case.yaml` (further arguments, the exit status)
and `expected.out`, what the command prints, compared whole."""

from pathlib import Path

import pytest
import yaml

from webhook.commands.cli import main

CASES = Path(__file__).parent / "diff"


@pytest.mark.parametrize("case", sorted(path.name for path in CASES.iterdir() if path.is_dir()))
def test_diff_prints_what_the_case_expects(case: str, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(CASES / case)
    spec = yaml.safe_load(Path("case.yaml").read_text())
    code = main(["diff", "--base", "old", "--policies", "new", "-f", "manifests.yaml", *spec["args"]])
    captured = capsys.readouterr()
    assert captured.out == Path("expected.out").read_text(), captured.out
    assert code == spec["exit"], captured.err


def test_every_verdict_of_the_issue_has_a_case() -> None:
    """Stranded by a missing label, a taint, requests, a gang, a spot class; a change with none; a removal; a
    broken test suite."""
    printed = "".join(path.read_text() for path in CASES.glob("*/expected.out"))
    for phrase in ("stranded: no node has node-pool=gpu2", "stranded: taint dedicated=gpu:NoSchedule not tolerated",
                   "no node with node-pool=general has room for cpu 16",
                   "stranded: gang pretrain of 8 needs 8 nodes with room for nvidia.com/gpu 8, 6 have room",
                   "stranded: spot-share class spot:", "no longer applied: gpu-pool/pool, gpu-pool/gpu-taint",
                   "**2 manifests change, 0 would be stranded (of 2 manifests)**",
                   "test cases the change breaks:\n  tests/gpu-pool-test.yaml: results[0] Deployment/ml/train"):
        assert phrase in printed, phrase
