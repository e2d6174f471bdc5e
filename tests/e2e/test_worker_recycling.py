"""A worker whose Kubernetes CEL library calls have leaked their budget is replaced, and no admission fails.

cel-expr-python 0.1.3 leaks what a Python-implemented function is given (webhook/policy/cel_libraries/
leaks.py). The real server runs with a budget small enough to be spent in a few dozen admissions; every
admission must still be answered, by the old worker, by its sibling, or by its replacement.
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import fixture_request
from tests.e2e.server import running_server

pytestmark = pytest.mark.e2e

POLICY = """
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: library-calls}
spec:
  rules:
  - name: named-containers
    condition: "pod.spec.containers.exists(c, c.name.find('[a-z]+') != '') && isQuantity('1Gi' + '')"
    action: add-node-selector
    parameters: {pool: general}
"""


def test_a_worker_past_its_leak_budget_is_replaced_and_every_admission_is_answered(
        tmp_path: Path, certificates: Any) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "library.yaml").write_text(POLICY)
    review = json.dumps(fixture_request("pod-bare-create-dryrun"))
    with running_server(tmp_path, certificates, policies=policies,
                        extra=["--cel-leak-budget-mib", "0.02"]) as server:
        first_workers = set(server.worker_pids())
        answers = []
        with requests.Session() as session:
            for _ in range(400):
                response = session.post(server.url + "/mutate?timeout=10s", data=review, timeout=10,
                                        verify=str(server.ca), headers={"Content-Type": "application/json"})
                answers.append((response.status_code, response.json()["response"].get("patch") is not None))
        log = server.log_text()
        replaced = re.findall(r"worker (\d+) is replaced: Kubernetes CEL library calls leaked", log)
        later_workers = set(server.worker_pids())
    assert answers == [(200, True)] * 400
    assert len(replaced) >= 2, log[-3000:]
    assert len(set(replaced)) == len(replaced), "each replacement is said once"
    assert later_workers - first_workers, "the arbiter started replacements"
    assert "Traceback" not in log
