"""`placer dev`: run Placer on this machine in front of a development cluster, registered by URL.

A dev cluster (kind, minikube, a VM, a local or lab API server) has no image of Placer and no Service for it;
what it needs is the CRDs and the two webhook configurations with `clientConfig.url` pointing at this machine
and a `caBundle` that signs the certificate served there (`manifests`). With `--kube` they are installed,
`placer serve --kube` runs (keeping the `placer-dev` rules to what the policies, the cluster's and
`--policies`, can act on: `webhook.cluster.registration`), the API server is asked which of this machine's
addresses it reaches Placer at (`reach`), and on exit (Ctrl-C, SIGTERM) what the session made is removed
again, webhooks first, and never a CRD that holds the user's objects (`install`).
"""

import argparse
import logging
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.connection import LEASE_NAMESPACE, ConnectionSetupError, connect
from webhook.commands.certs import IssuedCertificates, issue
from webhook.commands.dev.install import DevInstall
from webhook.commands.dev.manifests import (
    DEFAULT_MANIFESTS,
    DEV_NAME,
    MUTATING_PATH,
    VALIDATING_PATH,
    DevError,
    crds,
    dev_manifests,
    webhook_configurations,
    webhook_url,
)
from webhook.commands.dev.reach import candidate_hosts, reachable_host
from webhook.commands.flags import add_cluster, add_log_level, add_policies

log = logging.getLogger(__name__)

DEFAULT_PORT = 9443


def add_parser(commands: Any) -> None:
    """Register `placer dev` on the CLI's subcommands."""
    dev = commands.add_parser(
        "dev",
        help="run Placer here for a dev cluster: webhooks registered by URL, removed again on exit",
        description="Make a CA and a serving certificate, render the CRDs and both webhook configurations "
        "with clientConfig.url and caBundle (from deploy/). Without --kube, print them. With --kube, install "
        "them, run `placer serve --kube`, and on exit remove what was made, but never a CRD holding objects "
        "you made.",
    )
    dev.add_argument("--kube", action="store_true", help="install into the cluster, serve, clean up on exit")
    add_cluster(dev, when="--kube")
    dev.add_argument(
        "--host",
        metavar="DNS_OR_IP",
        action="append",
        help="name or IP the API server dials (URL and certificate SAN); repeat to try several in order. "
        "Default: the first of this machine's addresses the API server reaches",
    )
    dev.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N",
                     help="port in the URL, and to listen on (default: %(default)s)")
    dev.add_argument("--address", default="0.0.0.0", metavar="ADDR", help="address to listen on (default: %(default)s)")
    dev.add_argument("--certs", metavar="DIR", default="certs/dev",
                     help="where the CA and certificate go (default: %(default)s)")
    add_policies(dev, default=None, role="served besides the cluster's (policies/ is never loaded unasked)")
    dev.add_argument("--manifests", metavar="DIR", default=str(DEFAULT_MANIFESTS),
                     help="the deploy/base to render (default: %(default)s)")
    reports = dev.add_mutually_exclusive_group()
    reports.add_argument("--reports", dest="reports", action="store_true", default=None,
                         help="install the PolicyReport CRDs, so Placer keeps reports (the default)")
    reports.add_argument("--no-reports", dest="reports", action="store_false", help="no PolicyReports")
    crd = dev.add_mutually_exclusive_group()
    crd.add_argument("--keep-crd", action="store_true",
                     help="keep the SchedulingPolicy CRD this command created on exit, even empty")
    crd.add_argument("--delete-crd", action="store_true",
                     help="on exit, delete the SchedulingPolicy CRD placer dev made, with every policy in it")
    add_log_level(dev)
    dev.set_defaults(run=run)


def say(message: str) -> None:
    print(f"placer dev: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """`placer dev`: print the dev manifests, or (with --kube) install, serve and clean up."""
    reports = args.reports is not False
    try:
        if not args.kube:
            host = (args.host or ["127.0.0.1"])[0]
            issued = issue(Path(args.certs), [host, "localhost", "127.0.0.1"], common_name=host)
            documents = dev_manifests(Path(args.manifests), webhook_url(host, args.port), issued.ca_bundle(),
                                      reports=reports)
            print(yaml.safe_dump_all(documents, sort_keys=False), end="")
            print(f"# serve with: placer serve --kube --bind {args.address}:{args.port} --tls-cert {issued.cert} "
                  f"--tls-key {issued.key}", file=sys.stderr)
            return 0
        return DevSession(args, reports=reports).run()
    except DevError as error:
        say(str(error))
        return 1


@dataclass
class DevSession:
    """One `placer dev --kube` run."""

    args: argparse.Namespace
    reports: bool
    stop_requested: bool = False

    def run(self) -> int:
        args = self.args
        kubeconfig = Path(args.kubeconfig) if args.kubeconfig else None
        try:
            connection = connect(kubeconfig, context=args.context)
        except ConnectionSetupError as error:
            raise DevError(str(error)) from None
        hosts = list(dict.fromkeys(args.host or candidate_hosts(connection.server)))
        issued = issue(Path(args.certs), [*hosts, "localhost", "127.0.0.1"], common_name=hosts[0])
        manifests = Path(args.manifests)
        definitions = crds(manifests, reports=self.reports)
        webhook_configurations(manifests, "https://check.invalid", "")  # a broken file fails before any write
        previous = {sig: signal.signal(sig, self._request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        api = KubeApi(connection)
        install = DevInstall(api, say)
        try:
            with ExitStack() as cleanup:
                cleanup.callback(install.remove_rest, keep_crd=args.keep_crd, delete_crd=args.delete_crd)
                install.ensure({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}})
                for definition in definitions:
                    install.ensure(definition)
                install.wait_established()
                for collection in (MUTATING_PATH, VALIDATING_PATH):
                    install.remove_stale(collection, DEV_NAME)
                server = cleanup.enter_context(self._server(args, issued, kubeconfig))
                cleanup.callback(install.remove_webhooks)  # LIFO: before the server stops, on any exit
                self._wait_until_serving(server, issued, args.port)
                if self.stop_requested:
                    return 0
                try:
                    host = reachable_host(api, hosts, args.port, issued.ca_bundle(), say,
                                          stopped=lambda: self.stop_requested)
                except DevError:
                    if self.stop_requested:
                        return 0
                    raise
                for document in webhook_configurations(manifests, webhook_url(host, args.port),
                                                       issued.ca_bundle()):
                    install.put_webhook(document)
                say(f"serving {webhook_url(host, args.port)} for {connection.server}; Ctrl-C removes what "
                    "was installed")
                while not self.stop_requested and server.poll() is None:
                    time.sleep(0.2)
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

    @contextmanager
    def _server(self, args: argparse.Namespace, issued: IssuedCertificates,
                kubeconfig: Path | None) -> Iterator[subprocess.Popen[bytes]]:
        """`placer serve --kube` as a child process, stopped with SIGTERM (graceful: in-flight reviews answered)."""
        with ExitStack() as stack:
            policies = args.policies or [stack.enter_context(tempfile.TemporaryDirectory(prefix="placer-dev-"))]
            command = [sys.executable, "-m", "webhook", "serve", "--kube", "--bind", f"{args.address}:{args.port}",
                       "--tls-cert", str(issued.cert), "--tls-key", str(issued.key), "--log-level", args.log_level,
                       "--webhook-configuration", DEV_NAME]  # its rules kept as the deployed Placer keeps `placer`'s
            command += [f"--policies={path}" for path in policies]
            if kubeconfig is not None:
                command += ["--kubeconfig", str(kubeconfig)]
            if args.context:
                command += ["--context", args.context]
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
