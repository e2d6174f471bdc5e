"""Workers are replaced before their memory grows unbounded, and no admission fails meanwhile.

cel-expr-python 0.1.3 leaks what a Python-implemented function is given (webhook/policy/cel/libraries/
leaks.py). A worker that has leaked its budget asks for fresh workers (SIGHUP to the main process: granian
starts each new worker beside an old one, then stops the old one gracefully), and granian replaces a worker
whose resident memory is over `--worker-max-rss-mib` the same way. The real server runs with a budget, or
a memory limit, small enough to be spent at once; every admission must still be answered, by the old
worker, by its sibling, or by its replacement.
"""

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import fixture_request
from tests.e2e.server import RunningServer, running_server

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


def _keep_asking(server: RunningServer, done: Callable[[], bool], timeout: float = 60.0) -> list[tuple[int, bool]]:
    """Admissions on a kept-alive connection (reopened when the server closes it) until `done()`: (status,
    patched) for each, (0, False) for a request whose connection broke before it was answered. Each Pod's
    container has a name of its own: the policy observes it, so its condition is evaluated (and its library
    functions called) for every Pod, where a Pod observed alike would be answered from the outcome kept for
    the one before (`webhook.policy.observed_memo`)."""
    body = fixture_request("pod-bare-create-dryrun")
    answers = []
    deadline = time.monotonic() + timeout
    with requests.Session() as session:
        while not done() and time.monotonic() < deadline:
            body["request"]["object"]["spec"]["containers"][0]["name"] = f"trainer-{len(answers)}"
            review = json.dumps(body)
            try:
                response = session.post(server.url + "/mutate?timeout=10s", data=review, timeout=10,
                                        verify=str(server.ca), headers={"Content-Type": "application/json"})
            except requests.ConnectionError:
                answers.append((0, False))
                continue
            answers.append((response.status_code, response.json()["response"].get("patch") is not None))
    return answers


def _assert_answered(answers: list[tuple[int, bool]], log: str, *, patched: bool) -> None:
    """Every admission answered 200, but for a request sent as the first on a new connection at the moment
    the worker that accepted it stopped (a draining worker closes each connection after its response, so
    the client keeps opening new ones; webhook/server/respawn_drain.py): at most one per worker stopped."""
    broken = answers.count((0, False))
    answered = [answer for answer in answers if answer != (0, False)]
    assert answered and {status for status, _ in answered} == {200}
    assert not patched or all(patch for _, patch in answered)
    assert broken <= log.count("Stopping old worker"), (broken, log.count("Stopping old worker"))


def _files_of_exited(metrics: Path, server: RunningServer) -> list[str]:
    alive = {server.process.pid, *server.worker_pids()}
    return [path.name for path in metrics.glob("*.db")
            if path.stem.rsplit("_", 1)[-1].isdigit() and int(path.stem.rsplit("_", 1)[-1]) not in alive]


def test_a_worker_past_its_leak_budget_is_replaced_and_every_admission_is_answered(
        tmp_path: Path, certificates: Any) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "library.yaml").write_text(POLICY)
    with running_server(tmp_path, certificates, policies=policies,
                        extra=["--cel-leak-budget-mib", "0.02"]) as server:
        first_workers = set(server.worker_pids())

        def replaced() -> list[str]:
            return re.findall(r"worker (\d+) is replaced: Kubernetes CEL library calls leaked", server.log_text())

        answers = _keep_asking(server, lambda: len(replaced()) >= 2 and not set(server.worker_pids()) & first_workers)
        log = server.log_text()
        later_workers = set(server.worker_pids())
    _assert_answered(answers, log, patched=True)
    assert len(replaced()) >= 2, log[-3000:]
    assert len(set(replaced())) == len(replaced()), "each replacement is said once"
    assert not later_workers & first_workers, "granian started replacements"
    assert "Traceback" not in log


def test_a_worker_over_its_memory_limit_is_replaced_every_admission_answered_and_counted(
        tmp_path: Path, certificates: Any) -> None:
    """Also the metrics: the replaced workers' counts stay in the totals, their files do not stay behind."""
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    with running_server(tmp_path, certificates, extra=["--worker-max-rss-mib", "1"],
                        env={"PROMETHEUS_MULTIPROC_DIR": str(metrics)}) as server:
        first_workers = set(server.worker_pids())
        answers = _keep_asking(server, lambda: not set(server.worker_pids()) & first_workers)
        log = server.log_text()
        later_workers = set(server.worker_pids())
        # The main process folds the files of exited workers every second; workers keep being replaced (every
        # one is over 1 MiB), so a worker may just have exited: wait for a moment when none is left.
        deadline = time.monotonic() + 15
        while (left := _files_of_exited(metrics, server)) and time.monotonic() < deadline:
            time.sleep(0.2)
        text = server.get("/metrics").text
    _assert_answered(answers, log, patched=False)
    assert not later_workers & first_workers, log[-3000:]
    assert left == [], left
    assert (metrics / "counter_folded.db").exists()
    counted = sum(float(line.split()[-1]) for line in text.splitlines()
                  if line.startswith("placer_admission_requests_total{"))
    assert len([answer for answer in answers if answer != (0, False)]) <= counted <= len(answers)
    assert "RSS over threshold" in log
