"""Faults while a closed-loop client keeps admissions coming: certificate rotation, policy rewrites, a killed
worker. Each test counts the failed requests the client saw and prints them (`-n 0 -s` shows the figures).

Every test runs in a short variant in the default suite and a long one behind the `slow` marker
(`pytest -m slow`).
"""

import os
import signal
import socket
import ssl
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.e2e.closed_loop import ClosedLoopClient
from tests.e2e.server import RunningServer, running_server
from tests.helpers import decode_patch, node_selector_policy, write_configmap_volume
from webhook.commands.certs import issue

pytestmark = pytest.mark.e2e

WORKERS_REPLACED_PER_ROTATION = 2
"""`running_server` starts two workers; a certificate rotation replaces each (SIGHUP)."""
DURATIONS = [pytest.param(4.0, id="short"), pytest.param(120.0, id="long", marks=pytest.mark.slow)]


def _policy_set(generation: str) -> dict[str, str]:
    """Two files with one policy each: an answer mixing two generations would show two different values."""
    return {"pool.yaml": node_selector_policy("pool", "pool", generation),
            "zone.yaml": node_selector_policy("zone", "zone", generation)}


def _node_selector(review: dict[str, Any]) -> Hashable:
    for op in decode_patch(review):
        if op["path"] == "/spec/nodeSelector":
            return tuple(sorted(op["value"].items()))
    return ()


def _report(what: str, client: ClosedLoopClient) -> None:
    kinds = {"connecting": sum(f.connecting for f in client.failures),
             "first on its connection": sum(f.fresh and not f.connecting for f in client.failures),
             "on a kept-alive connection": sum(not (f.fresh or f.connecting) for f in client.failures)}
    print(f"\n{what}: {client.answered()} answered, {len(client.failures)} failed "
          f"({', '.join(f'{count} {kind}' for kind, count in kinds.items())})")


def _served_certificate(server: RunningServer) -> bytes:
    """The certificate a new connection gets. A probe the kernel queued on a worker that stopped before
    accepting it is reset (docs/serving.md, new connections during a replacement): it says nothing of the
    certificate, so it is made again; the admissions the client sends are what the test counts."""
    host, port = server.url.removeprefix("https://").split(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    for _ in range(20):
        try:
            with socket.create_connection((host, int(port))) as raw, context.wrap_socket(raw) as tls:
                certificate = tls.getpeercert(binary_form=True)
        except (ConnectionResetError, ssl.SSLEOFError):
            time.sleep(0.05)
            continue
        assert certificate is not None
        return certificate
    raise AssertionError("20 probe connections in a row were reset")


def _atomic_write(path: Path, data: bytes) -> None:
    staging = path.with_name(path.name + ".tmp")
    staging.write_bytes(data)
    os.replace(staging, path)


@pytest.mark.parametrize("duration", DURATIONS)
def test_certificate_rotation_under_load_fails_no_request_on_a_kept_alive_connection(
        tmp_path: Path, duration: float) -> None:
    """cert-manager or a Secret update replaces the pair on disk: key first, then certificate, each by rename.

    Rotations repeat for `duration`, alternating between two key pairs signed by the same CA (a renewal);
    the client opens a new connection every 20 requests, so handshakes keep happening throughout. No request
    on a connection that has served one fails: the worker about to be stopped closes each connection after
    its response first (webhook/server/respawn_drain.py). A new connection may still fail, when the worker
    it reached is being replaced: one the kernel queued on that worker's listening socket and the worker did
    not accept before it stopped is reset (without `net.ipv4.tcp_migrate_req=1`, which hands it to another
    worker), and one the worker accepted is closed as idle by its graceful stop if the first request has not
    arrived yet. Each rotation replaces both workers, and each stopping worker can lose the connections made
    in its last moments: at most two per worker replaced is allowed (measured: 4, 1 and 5 in 9 rotations of
    the long variant, about 300,000 admissions each, the client opening ~80 connections a second; 3 in one
    rotation of the short variant on a machine busy with the rest of the suite).
    """
    first = issue(tmp_path / "first", ["localhost", "127.0.0.1"])
    (tmp_path / "second").mkdir()
    for name in ("ca.crt", "ca.key"):
        (tmp_path / "second" / name).write_bytes((tmp_path / "first" / name).read_bytes())
    second = issue(tmp_path / "second", ["localhost", "127.0.0.1"])
    assert second.cert.read_bytes() != first.cert.read_bytes()
    live = tmp_path / "live"
    live.mkdir()
    for name in ("tls.crt", "tls.key"):
        (live / name).write_bytes((tmp_path / "first" / name).read_bytes())
    bundle = first.ca_cert
    served = type(first)(bundle, live / "tls.crt", live / "tls.key")
    rotations, slowest = 0, 0.0
    with running_server(tmp_path, served) as server, ClosedLoopClient(
            server.url, bundle, fixture_request("pod-bare-create-dryrun"), reconnect_every=20) as client:
        client.wait_for_answers(20)
        until = time.monotonic() + duration
        while rotations == 0 or time.monotonic() < until:
            source = tmp_path / ("second" if rotations % 2 == 0 else "first")
            _atomic_write(live / "tls.key", (source / "tls.key").read_bytes())
            _atomic_write(live / "tls.crt", (source / "tls.crt").read_bytes())
            expected = ssl.PEM_cert_to_DER_cert((source / "tls.crt").read_text())
            rotated_at = time.monotonic()
            # Every worker is replaced, one after the other: wait until six new connections in a row get the new pair.
            while any(_served_certificate(server) != expected for _ in range(6)):
                assert time.monotonic() - rotated_at < 60, "new connections still get the old certificate"
                time.sleep(0.1)
            slowest = max(slowest, time.monotonic() - rotated_at)
            rotations += 1
            client.wait_for_answers(20)
    _report(f"certificate rotation ({rotations} rotations, every worker serving the new pair within "
            f"{slowest:.1f}s)", client)
    assert [f for f in client.failures if not (f.connecting or f.fresh)] == [], "a kept-alive connection failed"
    assert len(client.failures) <= 2 * WORKERS_REPLACED_PER_ROTATION * rotations, client.failures
    assert "TLS certificate changed" in server.log_text()


@pytest.mark.parametrize("duration", DURATIONS)
def test_policy_rewrites_under_load_are_served_whole_and_never_fail(tmp_path: Path, certificates: Any,
                                                                   duration: float) -> None:
    """A ConfigMap-mounted policy directory updated every 0.3 s (the kubelet swaps its `..data` symlink).

    Every answer must show one generation in both keys; both workers re-read the files on their own, so
    answers may move between generations in any order, but never mix two.
    """
    volume = tmp_path / "policies"
    write_configmap_volume(volume, _policy_set("g0"), "0")
    with running_server(tmp_path, certificates, policies=volume) as server, ClosedLoopClient(
            server.url, certificates.ca_cert, fixture_request("pod-bare-create-dryrun"),
            inspect=_node_selector) as client:
        client.wait_for_answers(20)
        generation = 0
        until = time.monotonic() + duration
        while time.monotonic() < until:
            generation += 1
            write_configmap_volume(volume, _policy_set(f"g{generation}"), str(generation))
            time.sleep(0.3)
        final = (("pool", f"g{generation}"), ("zone", f"g{generation}"))
        deadline = time.monotonic() + 10
        while client.signatures(since=time.monotonic() - 0.5) != {final}:
            assert time.monotonic() < deadline, "the last generation was never served by every worker"
            time.sleep(0.2)
    _report(f"policy rewrites ({generation} generations)", client)
    assert client.failures == []
    signatures = client.signatures()
    mixed = [s for s in signatures if len(s) != 2 or len({value for _, value in s}) != 1]
    assert mixed == [], mixed
    assert len(signatures) > 2, "the rewrites were not seen under load"


def _started(pid: int) -> int:
    """When the process started (clock ticks since boot: /proc/PID/stat, field 22)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


@pytest.mark.parametrize("duration", DURATIONS)
def test_a_worker_killed_under_load_is_replaced_and_the_others_keep_answering(
        tmp_path: Path, certificates: Any, duration: float) -> None:
    """SIGKILL a worker repeatedly: only the requests in flight on it may fail, and a new worker takes over.

    The killed worker cannot answer what it was processing; that is what `failurePolicy` is for. Its idle
    keep-alive connections are closed by the kernel and the client (like the API server's) reconnects. The
    oldest worker is killed each time, every 3 s: granian stops the server when a worker dies within 5.5 s
    of being started (a crash loop: tests/e2e/test_worker_deaths.py), and the pod is restarted.
    """
    connections = 4
    kills: list[float] = []
    with running_server(tmp_path, certificates) as server, ClosedLoopClient(
            server.url, certificates.ca_cert, fixture_request("pod-bare-create-dryrun"),
            connections=connections) as client:
        client.wait_for_answers(20)
        until = time.monotonic() + duration
        while not kills or time.monotonic() < until:
            victim = min(server.worker_pids(), key=_started)
            kills.append(time.monotonic())
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 20
            while len(server.worker_pids()) < 2 or victim in server.worker_pids():
                assert time.monotonic() < deadline, "the killed worker was not replaced"
                time.sleep(0.05)
            client.wait_for_answers(40)
            time.sleep(max(0.0, kills[-1] + 3.0 - time.monotonic()))
        assert server.process.poll() is None
    _report(f"worker SIGKILL ({len(kills)} kills)", client)
    failures = [f for f in client.failures if not f.connecting]
    assert len(failures) <= len(kills) * connections, failures[:5]
    # A failure is a request the killed worker had in flight (it ends when the kill closes its connection),
    # or a new connection queued on its listening socket when it died: both right after a kill.
    assert all(any(0 <= f.at - kill < 2.0 for kill in kills) for f in client.failures), client.failures[:5]
