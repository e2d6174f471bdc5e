"""`placer serve --kube` while the API server misbehaves and a closed-loop client keeps admissions coming.

The watch is cut mid-stream, expires with 410 Gone (in the stream, and on the re-watch after compaction),
fails with 5xx, and the API server goes away and comes back; after each fault a policy change must reach
the answers (the watch has recovered), and no admission may fail meanwhile: they are answered from the
last good snapshot. A second test starts Placer while the API server is unreachable.
"""

import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.e2e.closed_loop import ClosedLoopClient
from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch
from tests.kube.fake_apiserver import NAMESPACES, POLICIES, FakeApiServer
from tests.kube.test_serve_with_cluster import pool_policy

pytestmark = pytest.mark.e2e


def _pool(review: dict[str, Any]) -> Hashable:
    for op in decode_patch(review):
        if op["path"] == "/spec/nodeSelector":
            return op["value"].get("pool")
    return None


def _wait_until_served(client: ClosedLoopClient, pool: str | None, timeout: float = 30.0) -> float:
    """Seconds until every answer of the last half second shows `pool`."""
    started = time.monotonic()
    while client.signatures(since=time.monotonic() - 0.5) != {pool}:
        assert time.monotonic() - started < timeout, f"{pool} never served; recent: {client.signatures(started)}"
        time.sleep(0.1)
    return time.monotonic() - started


def _serve(tmp_path: Path, certificates: Any, kubeconfig: Path) -> Any:
    empty = tmp_path / "no-policies"
    empty.mkdir(exist_ok=True)
    return running_server(tmp_path, certificates, policies=empty, wait=False,
                          extra=["--kube", "--kubeconfig", str(kubeconfig)])


def _load(server: RunningServer, certificates: Any) -> ClosedLoopClient:
    return ClosedLoopClient(server.url, certificates.ca_cert, fixture_request("pod-bare-create-dryrun"),
                            inspect=_pool)


def _wait_healthy(server: RunningServer) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            if server.get("/healthz").status_code == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, server.log_text()[-2000:]
        time.sleep(0.1)


@pytest.mark.parametrize("duration", [pytest.param(0.0, id="short"),
                                      pytest.param(300.0, id="long", marks=pytest.mark.slow)])
def test_watch_faults_under_load_fail_no_admission_and_the_watch_recovers(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path, duration: float) -> None:
    """Every fault once (short), or the whole sequence again and again for `duration` seconds (long)."""
    apiserver.put_namespace("team-a")
    apiserver.put_policy(pool_policy("start"))
    port = int(apiserver.url.rsplit(":", 1)[1])
    faults = {
        "watch cut": apiserver.drop_watches,
        "410 Gone in the stream": apiserver.expire_watches,
        "410 Gone on re-watch": lambda: (apiserver.compact(), apiserver.drop_watches()),
        "5xx on list and watch": lambda: (apiserver.fail("GET", POLICIES, 500, "InternalError", times=3),
                                          apiserver.fail("GET", NAMESPACES, 503, "ServiceUnavailable", times=2),
                                          apiserver.drop_watches()),
        "unreachable for 3 s": lambda: (apiserver.shutdown(), time.sleep(3),
                                        apiserver.serve(certificates.cert, certificates.key, port=port)),
    }
    with _serve(tmp_path, certificates, kubeconfig) as server:
        _wait_healthy(server)
        with _load(server, certificates) as client:
            _wait_until_served(client, "start")
            recovered: dict[str, float] = {}
            until = time.monotonic() + duration
            step = 0
            while step == 0 or time.monotonic() < until:
                for fault, inflict in faults.items():
                    inflict()
                    step += 1
                    apiserver.put_policy(pool_policy(f"after-{step}"))
                    recovered[fault] = max(recovered.get(fault, 0.0), _wait_until_served(client, f"after-{step}"))
            assert server.get("/readyz").status_code == 200
    print(f"\nAPI server faults ({step}): {client.answered()} answered, {len(client.failures)} failed; "
          "slowest recovery: "
          + ", ".join(f"{fault} {seconds:.1f}s" for fault, seconds in recovered.items()))
    assert client.failures == []
    log = server.log_text()
    assert "retrying in" in log


def test_api_server_unreachable_at_start_admissions_are_answered_and_the_watch_starts_later(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a")
    apiserver.put_policy(pool_policy("cluster"))
    port = int(apiserver.url.rsplit(":", 1)[1])
    apiserver.shutdown()
    with _serve(tmp_path, certificates, kubeconfig) as server:
        _wait_healthy(server)
        with _load(server, certificates) as client:
            client.wait_for_answers(50)
            assert server.get("/readyz").status_code == 503  # not ready: the Deployment keeps it out of the Service
            assert client.signatures() == {None}  # answered, fail-open, with the file policies (none here)
            apiserver.serve(certificates.cert, certificates.key, port=port)
            seconds = _wait_until_served(client, "cluster")
            assert server.get("/readyz").status_code == 200
    print(f"\nunreachable at start: {client.answered()} answered, {len(client.failures)} failed; "
          f"cluster policies served {seconds:.1f}s after the API server came up")
    assert client.failures == []
