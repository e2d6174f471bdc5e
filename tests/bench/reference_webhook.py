"""The floor of any patching webhook, for bench_apiserver: a minimal Go webhook (`go_reference/main.go`: Go's
HTTP/1.1 server and TLS) answering every review with the patch Placer answers for the bench's Pod; and the
floor of a Python one, the floor app of the direct benchmark on granian with Placer's settings
(`floor_app.routed`), answering the same patches.

It runs on this machine, where the API server reaches Placer started by the harness, and is registered by URL
for namespaces of its own (labelled `placer-e2e-go-reference: <route>`, not opted in to Placer). Its patches
are Placer's, read off the cluster: the difference between the Pod created where no webhook is called and the
Pod created where Placer patched it (`patch_between`); before measuring, a create through each route must
give the Pod Placer gave.
"""

import base64
import contextlib
import copy
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.bench.floor_app import granian_command
from tests.cluster.harness import E2E_NAME, MUTATING, Cluster, address_towards
from tests.conftest import REPO
from webhook.commands.certs import issue
from webhook.support.json_bytes import encode_json
from webhook.support.patches import diff
from webhook.support.typing import JSONPatch

SOURCE = REPO / "tests/bench/go_reference/main.go"
CONFIGURATION = f"{E2E_NAME}-go-reference"
ROUTE_LABEL = "placer-e2e-go-reference"
PORT_ENV = "PLACER_E2E_REFERENCE_PORT"


class NoGo(RuntimeError):
    """The Go toolchain is not on PATH: the reference webhook cannot be built."""


def build(workdir: Path) -> Path:
    """The reference webhook, built from source with the `go` on PATH (Go 1.19 or newer, no module needed)."""
    go = shutil.which("go")
    if go is None:
        raise NoGo("`go` is not on PATH: install Go 1.19 or newer to measure the patching floor")
    binary = workdir / "go-reference"
    environment = {**os.environ, "GOCACHE": str(workdir / "go-cache")}
    subprocess.run([go, "build", "-o", str(binary), str(SOURCE)], check=True, env=environment,
                   capture_output=True, timeout=600)
    return binary


TOKEN_VOLUME = "kube-api-access-"
"""The ServiceAccount admission plugin adds a projected token volume named this and five random characters,
drawn anew for every create (plugin/pkg/admission/serviceaccount/admission.go: ServiceAccountVolumeName,
names.SimpleNameGenerator): the same Pod created twice differs in that name, its mounts' too."""


def comparable(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What a mutating webhook may change of the bench's Pod: its labels, annotations and spec (names, uids,
    namespaces and times are the API server's and differ between namespaces; so does the name of the
    service account token volume, which is written here as its prefix)."""
    metadata = pod.get("metadata") or {}
    spec = copy.deepcopy(dict(pod.get("spec") or {}))
    for volume in spec.get("volumes") or []:
        _unnamed_token(volume)
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(kind) or []:
            for mount in container.get("volumeMounts") or []:
                _unnamed_token(mount)
    return {"metadata": {key: metadata[key] for key in ("labels", "annotations") if key in metadata},
            "spec": spec}


def _unnamed_token(named: dict[str, Any]) -> None:
    if str(named.get("name", "")).startswith(TOKEN_VOLUME):
        named["name"] = TOKEN_VOLUME


def patch_between(plain: Mapping[str, Any], patched: Mapping[str, Any]) -> JSONPatch:
    """The JSON Patch that turns the Pod created with no webhook into the Pod Placer patched: Placer's own
    patch, made by the same function from the same two objects (`webhook.support.patches.diff`)."""
    return diff(comparable(plain), comparable(patched))


def configuration(url: str, ca_bundle: str, routes: list[str], *, name: str = CONFIGURATION,
                  label: str = ROUTE_LABEL) -> dict[str, Any]:
    """A MutatingWebhookConfiguration `name` calling `url` + route for Pods created in namespaces labelled
    `<label>: <route>`; failurePolicy Fail, so that a reference that cannot be reached fails the run rather
    than admitting Pods unchanged."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": f"{route}.{name.removeprefix(E2E_NAME + '-')}.placer.dev",
            "clientConfig": {"url": f"{url}/{route}", "caBundle": ca_bundle},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {label: route}},
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
            "reinvocationPolicy": "Never",
        } for route in routes],
    }


@contextlib.contextmanager
def go_reference(cluster: Cluster, workdir: Path, patches: Mapping[str, JSONPatch | None]) -> Iterator[dict[str, str]]:
    """The reference webhook running here and registered, answering `patches[route]` (None: no patch) on each
    route; yields each route's namespace. Everything it made is gone afterwards."""
    binary = build(workdir)
    port = int(os.environ.get(PORT_ENV, "9444"))
    routes: list[str] = []
    for route, patch in patches.items():
        patch_file = workdir / f"go-reference-{route}.json"
        if patch is not None:
            patch_file.write_bytes(encode_json(patch))
        routes += ["-route", f"/{route}={patch_file if patch is not None else ''}"]

    def command(certs: Any) -> list[str]:
        return [str(binary), "-addr", f"0.0.0.0:{port}", "-tls-cert", str(certs.cert), "-tls-key", str(certs.key),
                *routes]

    with _running(cluster, workdir, list(patches), name=CONFIGURATION, label=ROUTE_LABEL, port=port,
                  command=command) as namespaces:
        yield namespaces


FLOOR_CONFIGURATION = f"{E2E_NAME}-python-floor"
FLOOR_ROUTE_LABEL = "placer-e2e-python-floor"
FLOOR_PORT_ENV = "PLACER_E2E_FLOOR_PORT"


@contextlib.contextmanager
def python_floor(cluster: Cluster, workdir: Path, patches: Mapping[str, JSONPatch | None]
                 ) -> Iterator[dict[str, str]]:
    """The floor app on granian as `placer serve` runs it (2 workers, HTTP/1.1, TLS 1.2+: the settings of
    bench_direct's floor), here and registered like the Go reference, answering `patches[route]` on each
    route; yields each route's namespace. Everything it made is gone afterwards."""
    port = int(os.environ.get(FLOOR_PORT_ENV, "9445"))
    routes_file = workdir / "python-floor-routes.json"
    routes_file.write_bytes(encode_json({f"/{route}": patch for route, patch in patches.items()}))

    def command(certs: Any) -> list[str]:
        return granian_command(host="0.0.0.0", port=port, cert=certs.cert, key=certs.key, workers=2,
                               target=["--factory", "tests.bench.floor_app:routed"])

    with _running(cluster, workdir, list(patches), name=FLOOR_CONFIGURATION, label=FLOOR_ROUTE_LABEL, port=port,
                  command=command, environment={"FLOOR_ROUTES": str(routes_file)}) as namespaces:
        yield namespaces


@contextlib.contextmanager
def _running(cluster: Cluster, workdir: Path, routes: list[str], *, name: str, label: str, port: int,
             command: Callable[[Any], list[str]], environment: Mapping[str, str] | None = None
             ) -> Iterator[dict[str, str]]:
    """`command(certificates)` running here (its own process group) with a serving certificate for the
    address the API server reaches this machine at; a namespace per route (labelled `<label>: <route>`, not
    opted in to Placer) and the configuration `name` sending their Pods to it. Yields each route's
    namespace; the configuration and the process are gone afterwards."""
    host = os.environ.get("PLACER_E2E_WEBHOOK_HOST") or address_towards(cluster.connection.server)
    certs = issue(workdir / f"{name}-certs", [host, "localhost", "127.0.0.1"], common_name=host)
    with (workdir / f"{name}.log").open("wb") as log:
        process = subprocess.Popen(command(certs), stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                   start_new_session=True, env={**os.environ, **(environment or {})})
    try:
        _wait_listening(port, certs.ca_cert, process)
        namespaces = {route: cluster.namespace({label: route}, opted_in=False) for route in routes}
        ca_bundle = base64.b64encode(certs.ca_cert.read_bytes()).decode()
        cluster.apply(MUTATING, configuration(f"https://{host}:{port}", ca_bundle, routes, name=name, label=label))
        try:
            yield namespaces
        finally:
            with contextlib.suppress(Exception):
                cluster.api.delete(f"{MUTATING}/{name}")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)


def _wait_listening(port: int, ca: Path, process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the reference webhook exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
                    context.wrap_socket(raw, server_hostname="127.0.0.1"):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
