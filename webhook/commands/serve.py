"""`placer serve`: the settings from flags and environment, development certificates, then the server."""

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from webhook.cluster.client.connection import in_cluster
from webhook.commands.certs import ensure_dev_certificates
from webhook.commands.flags import add_cluster, add_log_level, add_policies
from webhook.engine.exemption_seal import ExemptionKeyError, read_key
from webhook.support.config import (
    CEL_LEAK_BUDGET_MIB,
    DEFAULT_CERTS,
    DEFAULT_POLICIES,
    IDLE_TIMEOUT_SECONDS,
    READ_TIMEOUT_SECONDS,
    WORKER_MAX_RSS_MIB,
    Settings,
)
from webhook.support.logs import configure_logging


def add_parser(commands: Any) -> None:
    """`placer serve` and its flags."""
    serve = commands.add_parser("serve", help="run the webhook over HTTPS (granian worker processes)")
    add_policies(serve)
    kube = serve.add_mutually_exclusive_group()
    kube.add_argument(
        "--kube",
        dest="kube",
        action="store_true",
        default=None,
        help="watch SchedulingPolicies and Namespaces in the cluster (default when KUBERNETES_SERVICE_HOST is set)",
    )
    kube.add_argument("--no-kube", dest="kube", action="store_false", help="do not connect to a cluster")
    add_cluster(serve, when="--kube", in_cluster=True)
    serve.add_argument(
        "--webhook-configuration", metavar="NAME",
        help="with --kube: keep this MutatingWebhookConfiguration's rules to what the policies can act on",
    )
    serve.add_argument("--bind", metavar="HOST:PORT", default="127.0.0.1:8443",
                       help="address and port to listen on (default: %(default)s)")
    serve.add_argument("--tls-cert", metavar="FILE",
                       help=f"serving certificate, PEM (default: {DEFAULT_CERTS}/tls.crt, with tls.key created for "
                            "localhost when both are absent)")
    serve.add_argument("--tls-key", metavar="FILE",
                       help=f"its private key, PEM (default: {DEFAULT_CERTS}/tls.key)")
    serve.add_argument("--client-ca", metavar="FILE", help="require client certificates signed by this CA")
    serve.add_argument("--workers", type=int, default=2, metavar="N",
                       help="worker processes, one per core (default: %(default)s)")
    serve.add_argument(
        "--read-timeout", type=float, default=READ_TIMEOUT_SECONDS, metavar="SECONDS",
        help="answer 408 and close a connection whose request body takes longer to arrive (default: %(default)s)",
    )
    serve.add_argument(
        "--idle-timeout", type=float, default=IDLE_TIMEOUT_SECONDS, metavar="SECONDS",
        help="close a connection whose next request head takes longer to arrive, idle or trickling (at most 60; "
             "default: %(default)s)",
    )
    serve.add_argument(
        "--cel-leak-budget-mib", type=float, default=CEL_LEAK_BUDGET_MIB, metavar="MIB",
        help="replace a worker, gracefully, once Kubernetes CEL library calls have leaked this much in it "
             "(default: %(default)s)",
    )
    serve.add_argument(
        "--worker-max-rss-mib", type=int, default=WORKER_MAX_RSS_MIB, metavar="MIB",
        help="replace a worker, gracefully, whose resident memory is above this (0: never; default: %(default)s)",
    )
    serve.add_argument(
        "--worker-lifetime", type=int, default=0, metavar="SECONDS",
        help="replace each worker, gracefully, this long after it started (at least 60; 0: never; default: "
             "%(default)s)",
    )
    add_log_level(serve)
    serve.add_argument("--opt-in", default="api-server", choices=["api-server", "label-or-annotation"],
                       help="api-server: the webhook's namespaceSelector decides; label-or-annotation: Placer "
                            "also passes through objects of namespaces without the label or annotation "
                            "placer.dev/inject: enabled (default: %(default)s)")
    serve.add_argument(
        "--exemption-key", metavar="FILE",
        help="key of the seals that carry an exempt user's exemption to the pods of their workloads "
             "(docs/enforced-policies.md); with --kube the default is the key Placer makes and keeps itself, "
             "in a Secret of its namespace",
    )
    serve.set_defaults(run=run)


MIN_WORKER_LIFETIME_SECONDS = 60
"""granian refuses a shorter worker lifetime (`workers_lifetime`); said as a usage error, not a traceback."""


def run(args: argparse.Namespace) -> int:
    if 0 < args.worker_lifetime < MIN_WORKER_LIFETIME_SECONDS:  # a usage error changes nothing, logging included
        print(f"placer serve: --worker-lifetime {args.worker_lifetime}: at least {MIN_WORKER_LIFETIME_SECONDS} "
              "seconds (granian's minimum), or 0 for never", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    kube = args.kube if args.kube is not None else in_cluster()
    exemption_key = Path(args.exemption_key) if args.exemption_key else None
    if exemption_key is not None and not exemption_key.exists():
        # an earlier release's Deployment mounted an optional Secret there: with a cluster, Placer keeps its own
        consequence = ("the key is the Secret Placer keeps" if kube else
                       "exemptions stay with the request, and an exempt user's workloads get no pods")
        print(f"placer serve: --exemption-key {exemption_key}: no such file: {consequence}", file=sys.stderr)
        exemption_key = None
    if exemption_key is not None:
        try:
            read_key(exemption_key)
        except ExemptionKeyError as error:
            print(f"placer serve: --exemption-key {error}", file=sys.stderr)
            return 2
    default_tls = args.tls_cert is None and args.tls_key is None
    if args.webhook_configuration and not kube:
        print("placer serve: --webhook-configuration needs --kube (the controller keeps it)", file=sys.stderr)
        return 2
    # The controller process writes the cluster's policies and namespaces here; every worker reads them here.
    cluster_state = Path(tempfile.mkdtemp(prefix="placer-cluster-")) if kube else None
    settings = Settings(
        policies=tuple(args.policies or (DEFAULT_POLICIES,)),
        policies_explicit=bool(args.policies),
        bind=args.bind,
        tls_cert=Path(args.tls_cert) if args.tls_cert else DEFAULT_CERTS / "tls.crt",
        tls_key=Path(args.tls_key) if args.tls_key else DEFAULT_CERTS / "tls.key",
        client_ca=Path(args.client_ca) if args.client_ca else None,
        workers=args.workers,
        worker_max_rss_mib=args.worker_max_rss_mib or None,
        worker_lifetime=args.worker_lifetime or None,
        read_timeout=args.read_timeout,
        idle_timeout=args.idle_timeout,
        cel_leak_budget_mib=args.cel_leak_budget_mib,
        log_level=args.log_level,
        opt_in=args.opt_in,
        kubeconfig=Path(args.kubeconfig) if args.kubeconfig else None,
        context=args.context,
        cluster_state=cluster_state,
        webhook_configuration=args.webhook_configuration,
        exemption_key=exemption_key,
    )
    if default_tls and ensure_dev_certificates(DEFAULT_CERTS):
        print(f"placer: created development certificates for localhost in {DEFAULT_CERTS}/", file=sys.stderr)
    # Metrics from every worker land in one directory. prometheus_client decides at import time whether
    # to write there, so the server (and with it prometheus_client) is imported only after this line.
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="placer-metrics-"))
    from webhook.server.serve import serve  # noqa: PLC0415

    serve(settings)
    return 0
