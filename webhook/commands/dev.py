"""`placer dev`: run Placer on this machine in front of a development cluster, registered by URL.

A dev cluster (kind, minikube, a VM, a lab API server) has no image of Placer and no Service for it; what it
needs is the CRD and the two webhook configurations with `clientConfig.url` pointing at this machine and a
`caBundle` that signs the certificate served there. Those configurations are rendered from
`deploy/base/webhooks.yaml` (rules, selectors, failure policies), so the dev install stays in step with the
real one; only `clientConfig` and the names differ. With `--kube` they are installed, `placer serve --kube`
runs, and on exit (Ctrl-C, SIGTERM) everything this command created is deleted again, in the order that
never leaves the API server calling a webhook that is gone: the webhook configurations first.
"""

import argparse
import copy
import ipaddress
import logging
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlparse

import yaml

from webhook.cluster.client.api import ApiError, KubeApi
from webhook.cluster.client.connection import LEASE_NAMESPACE, ConnectionSetupError, connect
from webhook.commands.certs import IssuedCertificates, issue

log = logging.getLogger(__name__)

DEV_NAME = "placer-dev"
"""Name of the dev webhook configurations: never `placer`, so a real install is never replaced or deleted."""
DEFAULT_PORT = 9443
DEFAULT_MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "base"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
MUTATING_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
NAMESPACE_PATH = "/api/v1/namespaces"
_COLLECTIONS = {
    "CustomResourceDefinition": CRD_PATH,
    "MutatingWebhookConfiguration": MUTATING_PATH,
    "ValidatingWebhookConfiguration": VALIDATING_PATH,
}
_KIND_OF = {**{path: kind for kind, path in _COLLECTIONS.items()}, NAMESPACE_PATH: "Namespace"}


class DevError(RuntimeError):
    """A clear, one-line reason `placer dev` cannot go on."""


def add_parser(commands: Any) -> None:
    """Register `placer dev` on the CLI's subcommands."""
    dev = commands.add_parser(
        "dev",
        help="run Placer here for a dev cluster: certs for --host, webhooks registered by URL",
        description="Make a CA and a serving certificate for --host, render the CRD and both webhook "
        "configurations with clientConfig.url and caBundle (from deploy/base). Without --kube, print them. "
        "With --kube, install them, run `placer serve --kube`, and delete what was created on exit.",
    )
    dev.add_argument("--kube", action="store_true", help="install into the cluster, serve, clean up on exit")
    dev.add_argument("--kubeconfig", metavar="FILE", help="default: $KUBECONFIG, else ~/.kube/config")
    dev.add_argument(
        "--host",
        metavar="DNS_OR_IP",
        help="name or IP the API server dials (URL and certificate SAN); default: this machine's address "
        "on its route to the API server",
    )
    dev.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port in the URL (default {DEFAULT_PORT})")
    dev.add_argument("--address", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    dev.add_argument("--certs", metavar="DIR", default="certs/dev", help="where the CA and certificate go")
    dev.add_argument(
        "--policies",
        metavar="PATH",
        action="append",
        help="policy files to serve besides the cluster's (default: none; policies/ is never loaded unasked)",
    )
    dev.add_argument("--manifests", metavar="DIR", default=str(DEFAULT_MANIFESTS), help="deploy/base to render")
    dev.add_argument("--keep-crd", action="store_true", help="leave a CRD this command installed on exit")
    dev.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    dev.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """`placer dev`: print the dev manifests, or (with --kube) install, serve and clean up."""
    try:
        if not args.kube:
            host = args.host or "127.0.0.1"
            issued = issue(Path(args.certs), [host, "localhost", "127.0.0.1"], common_name=host)
            documents = dev_manifests(Path(args.manifests), webhook_url(host, args.port), issued.ca_bundle())
            print(yaml.safe_dump_all(documents, sort_keys=False), end="")
            print(f"# serve with: placer serve --kube --bind {args.address}:{args.port} --tls-cert {issued.cert} "
                  f"--tls-key {issued.key}", file=sys.stderr)
            return 0
        return DevSession(args).run()
    except DevError as error:
        print(f"placer dev: {error}", file=sys.stderr)
        return 1


def webhook_url(host: str, port: int) -> str:
    """`https://host:port`, an IPv6 address in brackets."""
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def dev_manifests(manifests: Path, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """The CRD(s) and both webhook configurations of `manifests`, registered at `url` with `ca_bundle`.

    Each webhook keeps its rules, selectors, failure policy and timeout; `clientConfig.service` becomes
    `url` + the service's path, and the configurations are named `placer-dev`.
    """
    documents: list[dict[str, Any]] = []
    for name in ("crd.yaml", "webhooks.yaml"):
        path = manifests / name
        try:
            loaded = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
        except OSError as error:
            raise DevError(f"cannot read {path}: {error.strerror} (give --manifests DIR: deploy/base)") from None
        documents.extend(loaded)
    rendered = []
    for document in documents:
        if document.get("kind") not in _COLLECTIONS:
            continue
        copied = copy.deepcopy(document)
        if copied["kind"] != "CustomResourceDefinition":
            copied["metadata"] = {**copied["metadata"], "name": DEV_NAME}
            for webhook in copied["webhooks"]:
                path = webhook["clientConfig"].get("service", {}).get("path", "")
                webhook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
        rendered.append(copied)
    if not any(d["kind"] == "MutatingWebhookConfiguration" for d in rendered):
        raise DevError(f"no MutatingWebhookConfiguration in {manifests}/webhooks.yaml")
    return rendered


def route_address(server: str) -> str:
    """This machine's address on its route to the API server `server` (a URL): an address the API server
    can usually dial back (the docker bridge for kind, the LAN address for a VM or a lab cluster).

    A UDP `connect` sends nothing; it only makes the kernel choose the source address.
    """
    parsed = urlparse(server)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 443
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            address = str(probe.getsockname()[0])
    except OSError as error:
        raise DevError(f"no route to the API server {server}: {error}; give --host") from None
    if ipaddress.ip_address(address).is_loopback:
        raise DevError(
            f"the API server {server} is reached over loopback (kind, a port-forward), so it cannot dial "
            "this machine at that address: give --host, the address its containers reach this machine at "
            "(kind on Linux: the kind network's gateway, docker network inspect kind -f "
            "'{{(index .IPAM.Config 0).Gateway}}'; Docker Desktop: host.docker.internal)"
        )
    return address


@dataclass
class DevSession:
    """One `placer dev --kube` run: what it created, so that exactly that is deleted on exit."""

    args: argparse.Namespace
    created: list[tuple[str, str]] = field(default_factory=list)
    """(collection path, name) of every object this session created, in creation order."""
    stop_requested: bool = False

    def run(self) -> int:
        args = self.args
        kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
        try:
            connection = connect(kubeconfig)
        except ConnectionSetupError as error:
            raise DevError(str(error)) from None
        host = args.host or route_address(connection.server)
        issued = issue(Path(args.certs), [host, "localhost", "127.0.0.1"], common_name=host)
        documents = dev_manifests(Path(args.manifests), webhook_url(host, args.port), issued.ca_bundle())
        crds = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
        webhooks = [d for d in documents if d["kind"] != "CustomResourceDefinition"]
        previous = {sig: signal.signal(sig, self._request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        api = KubeApi(connection)
        try:
            with ExitStack() as cleanup:
                cleanup.callback(self._delete_created, api)
                self._ensure(api, NAMESPACE_PATH, {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": LEASE_NAMESPACE}}, replace=False)
                for crd in crds:
                    self._ensure(api, CRD_PATH, crd, replace=False)
                with self._server(args, issued, kubeconfig) as server:
                    self._wait_until_serving(server, issued, args.port)
                    for document in webhooks:
                        self._ensure(api, _COLLECTIONS[document["kind"]], document, replace=True)
                    print(f"placer dev: serving {webhook_url(host, args.port)} for {connection.server}; "
                          "Ctrl-C removes what was installed", file=sys.stderr)
                    while not self.stop_requested and server.poll() is None:
                        time.sleep(0.2)
                    # webhooks first: no write should wait for a webhook that is going away
                    self._delete_created(api, kinds=(MUTATING_PATH, VALIDATING_PATH))
                    code = server.poll()
                    if code is not None and not self.stop_requested:
                        raise DevError(f"placer serve exited with status {code}")
            return 0
        finally:
            api.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True

    def _ensure(self, api: KubeApi, collection: str, document: dict[str, Any], *, replace: bool) -> None:
        """Create `document`; if it exists, leave it (`replace=False`: a CRD or namespace someone else owns)
        or, for our own `placer-dev` webhooks left by a session that was killed, replace it."""
        name = document["metadata"]["name"]
        try:
            api.create(collection, document)
        except ApiError as error:
            if error.code != 409:
                raise DevError(f"creating {document['kind']} {name}: {error}") from None
            if replace:
                current = api.get(f"{collection}/{name}")
                updated = {**document, "metadata": {**document["metadata"],
                                                    "resourceVersion": current["metadata"]["resourceVersion"]}}
                api.replace(f"{collection}/{name}", updated)
                self.created.append((collection, name))
                log.info("replaced %s %s left by an earlier session", document["kind"], name)
            else:
                print(f"placer dev: {document['kind']} {name} exists; left as it is", file=sys.stderr)
            return
        self.created.append((collection, name))
        print(f"placer dev: created {document['kind']} {name}", file=sys.stderr)

    def _delete_created(self, api: KubeApi, kinds: Sequence[str] | None = None) -> None:
        """Delete what this session created (newest first), or only the collections in `kinds`."""
        for collection, name in reversed(list(self.created)):
            if kinds is not None and collection not in kinds:
                continue
            if collection == CRD_PATH and self.args.keep_crd:
                continue
            try:
                api.delete(f"{collection}/{name}")
                print(f"placer dev: deleted {_KIND_OF[collection]} {name}", file=sys.stderr)
            except ApiError as error:
                if error.code != 404:
                    print(f"placer dev: could not delete {name}: {error}", file=sys.stderr)
            self.created.remove((collection, name))

    @contextmanager
    def _server(self, args: argparse.Namespace, issued: IssuedCertificates,
                kubeconfig: Path | None) -> Iterator[subprocess.Popen[bytes]]:
        """`placer serve --kube` as a child process, stopped with SIGTERM (graceful: in-flight reviews answered)."""
        with ExitStack() as stack:
            policies = args.policies or [stack.enter_context(tempfile.TemporaryDirectory(prefix="placer-dev-"))]
            command = [sys.executable, "-m", "webhook", "serve", "--kube", "--bind", f"{args.address}:{args.port}",
                       "--tls-cert", str(issued.cert), "--tls-key", str(issued.key), "--log-level", args.log_level]
            command += [f"--policies={path}" for path in policies]
            if kubeconfig is not None:
                command += ["--kubeconfig", str(kubeconfig)]
            command += ["--exemption-key", str(exemption_key(issued.cert.parent))]
            server = subprocess.Popen(command, start_new_session=True)  # Ctrl-C reaches us only
            try:
                yield server
            finally:
                if server.poll() is None:
                    server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=35)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()

    def _wait_until_serving(self, server: subprocess.Popen[bytes], issued: IssuedCertificates, port: int,
                            timeout: float = 60.0) -> None:
        """Wait for `/healthz` over TLS with our CA: the webhooks are registered only once they can answer."""
        context = ssl.create_default_context(cafile=str(issued.ca_cert))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stop_requested:
            if server.poll() is not None:
                raise DevError(f"placer serve exited with status {server.returncode} before serving")
            if _answers(lambda: urllib.request.urlopen(f"https://localhost:{port}/healthz", context=context,
                                                       timeout=2)):
                return
            time.sleep(0.2)
        if not self.stop_requested:
            raise DevError(f"placer serve did not answer on port {port} within {timeout:.0f}s")


def _answers(open_url: Callable[[], Any]) -> bool:
    try:
        with open_url() as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def exemption_key(directory: Path) -> Path:
    """The key that seals exempt users' templates (docs/enforced-policies.md), kept beside the dev certificates
    and made once, so that a dev install seals as a real one does and its seals survive a restart."""
    path = directory / "exemption.key"
    if not path.exists():
        path.write_text(secrets.token_hex(32) + "\n", encoding="utf-8")
        path.chmod(0o600)
    return path
