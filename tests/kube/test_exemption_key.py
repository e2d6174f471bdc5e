"""The exemption key Placer keeps itself (issue 60), against the fake API server: the leader makes the Secret
once, the other replicas read it, a create race ends with one key, a rotation reaches the workers' file, and
what cannot be used turns seals off rather than sealing with another key."""

import base64
import logging
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.server import running_server
from tests.helpers import decode_patch, review_for
from tests.kube.fake_apiserver import FakeApiServer, wait_for
from webhook.cluster.client.api import KubeApi
from webhook.cluster.exemption_key import (
    ERROR_CEILING,
    REFRESH_INTERVAL,
    SECRET_NAME,
    WAIT_INTERVAL,
    ExemptionKeySecret,
)
from webhook.engine.exemption_seal import SEAL_ANNOTATION, ExemptionKeys, read_keys, seal
from webhook.policy.state.cluster_state import exemption_key_path

SECRETS = "/api/v1/namespaces/placer-system/secrets"
OLD = b"o" * 64
NEW = b"n" * 64


def keeper(api: KubeApi, state: Path, *, leading: bool, key: bytes = NEW) -> ExemptionKeySecret:
    state.mkdir(exist_ok=True)
    return ExemptionKeySecret(api, namespace="placer-system", state_directory=state, leading=lambda: leading,
                              generate=lambda: key)


def secret_writes(apiserver: FakeApiServer) -> list[str]:
    return [method for method, path, _ in apiserver.requests if path.startswith(SECRETS) and method != "GET"]


def test_the_leader_makes_the_secret_once_and_every_replica_reads_the_same_key(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    follower = keeper(api, tmp_path / "b", leading=False, key=OLD)
    assert follower.sync() == WAIT_INTERVAL, "not leading: waits for the leader's Secret"
    assert not exemption_key_path(tmp_path / "b").exists() and not secret_writes(apiserver)
    leader = keeper(api, tmp_path / "a", leading=True)
    assert leader.sync() == REFRESH_INTERVAL
    secret = apiserver.other[SECRETS][SECRET_NAME]
    assert secret["type"] == "Opaque" and secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "placer"
    assert base64.b64decode(secret["data"]["key"]).strip() == NEW
    assert follower.sync() == REFRESH_INTERVAL
    for state in (tmp_path / "a", tmp_path / "b"):
        path = exemption_key_path(state)
        assert read_keys(path) == ExemptionKeys(NEW), "every replica's workers read the leader's key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert leader.sync() == REFRESH_INTERVAL
    assert secret_writes(apiserver) == ["POST"], "made once; a replica never writes it again"


def test_two_replicas_that_both_create_end_with_the_first_ones_key(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    first = keeper(api, tmp_path / "a", leading=True, key=OLD)
    second = keeper(api, tmp_path / "b", leading=True, key=NEW)
    apiserver.fail("GET", f"{SECRETS}/{SECRET_NAME}", 404, "NotFound")  # both saw no Secret
    first.sync()  # its GET is the 404 injected; it creates
    apiserver.fail("GET", f"{SECRETS}/{SECRET_NAME}", 404, "NotFound")
    second.sync()  # 404, create: 409 AlreadyExists, so it reads the first one's
    assert secret_writes(apiserver) == ["POST", "POST"]
    assert read_keys(exemption_key_path(tmp_path / "a")) == read_keys(exemption_key_path(tmp_path / "b")) == \
        ExemptionKeys(OLD)


def test_a_rotation_reaches_the_workers_with_the_previous_key_kept(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    replica = keeper(api, tmp_path, leading=True, key=OLD)
    replica.sync()
    secret = apiserver.other[SECRETS][SECRET_NAME]
    apiserver.put_readable(SECRETS, {**secret, "data": {"key": base64.b64encode(NEW).decode(),
                                                        "previous": base64.b64encode(OLD + b"\n").decode()}})
    replica.sync()
    assert read_keys(exemption_key_path(tmp_path)) == ExemptionKeys(NEW, (OLD,))


def test_an_unusable_secret_turns_seals_off_and_says_so_once(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, caplog: Any) -> None:
    replica = keeper(api, tmp_path, leading=True, key=OLD)
    replica.sync()
    secret = apiserver.other[SECRETS][SECRET_NAME]
    apiserver.put_readable(SECRETS, {**secret, "data": {"key": base64.b64encode(b"too-short").decode()}})
    with caplog.at_level(logging.ERROR):
        replica.sync()
        replica.sync()
    assert not exemption_key_path(tmp_path).exists(), "no seals rather than the old key: replicas never differ"
    assert replica.keys is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        f"exemption seals are off: Secret {SECRET_NAME}: the key: 9 bytes; an exemption key needs at least 32"]


def test_a_forbidden_read_waits_longer_each_time_and_keeps_what_the_workers_have(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    replica = keeper(api, tmp_path, leading=True, key=OLD)
    replica.sync()
    apiserver.fail("GET", f"{SECRETS}/{SECRET_NAME}", 403, "Forbidden", times=20)
    delays = [replica.sync() for _ in range(8)]
    assert delays == sorted(delays) and delays[-1] == ERROR_CEILING
    assert read_keys(exemption_key_path(tmp_path)) == ExemptionKeys(OLD), "an API outage changes no key"


def test_placer_serve_kube_seals_an_exempt_users_deployment_with_no_key_given(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    """The whole path with no extra step: the controller's leader makes the Secret, every worker seals with it."""
    apiserver.put_namespace("team-a", {"tenant": "team-a"})
    apiserver.put_policy({"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                          "metadata": {"name": "boundary"}, "spec": {
                              "enforcement": "Enforced", "namespaceSelector": {"matchLabels": {"tenant": "team-a"}},
                              "exemptions": {"groups": ["platform-admins"]}, "rules": [
                                  {"name": "pool", "action": "add-node-selector",
                                   "parameters": {"node-pool": "general"}}]}})
    empty = tmp_path / "no-policies"
    empty.mkdir()
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "agent", "namespace": "team-a"},
                  "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
                      "metadata": {"labels": {"app": "agent"}},
                      "spec": {"nodeSelector": {"node-pool": "gpu"}, "containers": [{"name": "c", "image": "i"}]}}}}
    body = review_for(deployment)
    body["request"]["userInfo"] = {"username": "alice", "groups": ["platform-admins", "system:authenticated"]}
    with running_server(tmp_path, certificates, policies=empty,
                        extra=["--kube", "--kubeconfig", str(kubeconfig)]) as server:
        wait_for(lambda: SECRET_NAME in apiserver.other.get(SECRETS, {}), timeout=20, what="the Secret made")
        key = base64.b64decode(apiserver.other[SECRETS][SECRET_NAME]["data"]["key"]).strip()

        def sealed_by_every_worker() -> bool:
            for _ in range(12):  # spread over both workers by the kernel
                answer = server.post("/mutate", json=body).json()["response"]
                ops = {op["path"]: op["value"] for op in decode_patch({"response": answer})}
                value = ops.get("/spec/template/metadata/annotations", {}).get(SEAL_ANNOTATION)
                if value != seal(key, "team-a", deployment["spec"]["template"]):
                    return False
            return True

        wait_for(sealed_by_every_worker, timeout=20, what="every worker sealing with the Secret's key")


@pytest.fixture(autouse=True)
def _quiet(caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="webhook.cluster.exemption_key")


def test_a_state_directory_gone_is_said_and_written_again_once_it_is_back(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, caplog: Any) -> None:
    replica = keeper(api, tmp_path / "state", leading=True, key=OLD)
    (tmp_path / "state").rmdir()  # the process is stopping, or the volume went away
    with caplog.at_level(logging.ERROR):
        assert replica.sync() == REFRESH_INTERVAL, "never raises: the keeper's thread goes on"
    assert "exemption key not written to the workers' state" in caplog.text
    (tmp_path / "state").mkdir()
    replica.sync()
    assert read_keys(exemption_key_path(tmp_path / "state")) == ExemptionKeys(OLD)
