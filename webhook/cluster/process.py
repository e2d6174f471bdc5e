"""The controller process: `python -m webhook.cluster.process --state DIRECTORY`, started (and restarted) by
the main process of `placer serve --kube`. Connects, discovers what the API server serves, builds the
controller with its leader election, health round and background reports, and runs it until a signal."""

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from webhook.admission.seal_keys import SealKeys
from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.client.connection import ConnectionSetupError, connect, identity
from webhook.cluster.client.discovery import (
    WATCHED_FEATURES,
    DiscoveryRefresh,
    ServedApis,
    discover,
    write_served_apis,
)
from webhook.cluster.client.leader import LeaseElector
from webhook.cluster.controller import LEASE_NAME, ClusterController
from webhook.cluster.exemption_key import ExemptionKeySecret
from webhook.cluster.health.health_round import HealthRound
from webhook.cluster.health.recent_counts import RecentCounts
from webhook.cluster.health.replica_reports import PUBLISH_INTERVAL, ReplicaPublisher
from webhook.cluster.registration import WebhookRegistration, match_conditions_served
from webhook.cluster.reports.background import BackgroundReports, ServedPolicies
from webhook.engine.exemption_seal import ExemptionKeyError, read_keys
from webhook.policy.cel.libraries.leaks import LeakAccount
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.fields.field_check import FieldChecks
from webhook.policy.sources.files import FilePolicySource
from webhook.policy.state.cluster_state import exemption_key_path
from webhook.support.config import CEL_LEAK_BUDGET_MIB
from webhook.support.logs import configure_logging
from webhook.support.metrics import MULTIPROC_ENV

log = logging.getLogger(__name__)

RESTART_TO_FOLLOW_THE_API_SERVER = 3
"""Exit code when discovery changed what the watches depend on: the supervisor of `placer serve` starts it again,
which then watches what the API server serves now."""
HEALTH_INTERVAL_ENV = "PLACER_HEALTH_INTERVAL"
"""Seconds between two publications of a replica's rule counts and two readings by the leader (default 30)."""


def _health_round(api: KubeApi, namespace: str) -> HealthRound:
    """Counts from the workers' multiprocess directory (`placer serve` starts this process with it), published
    under the Pod's name (downward API `POD_NAME`, else the hostname, which is the Pod's name too)."""
    directory = os.environ.get(MULTIPROC_ENV)
    interval = float(os.environ.get(HEALTH_INTERVAL_ENV) or PUBLISH_INTERVAL)
    publisher = None
    if directory:
        replica = os.environ.get("POD_NAME") or socket.gethostname()
        publisher = ReplicaPublisher(api, namespace=namespace, replica=replica, interval=interval,
                                     counts=RecentCounts.from_directory(Path(directory)))
    return HealthRound(api, namespace=namespace, publisher=publisher, interval=interval)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webhook.cluster.process")
    parser.add_argument("--state", required=True, type=Path, help="state directory the workers read")
    parser.add_argument("--kubeconfig", type=Path)
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--no-status", action="store_true", help="never write policy status (no leader election)")
    parser.add_argument("--webhook-configuration", metavar="NAME",
                        help="the MutatingWebhookConfiguration whose rules to keep to what the policies act on")
    parser.add_argument("--policies", action="append", default=[], metavar="PATH",
                        help="the file policies the workers serve too (what the registration must cover)")
    parser.add_argument("--exemption-key", type=Path,
                        help="key of exemption seals, honoured by the reports (default: the Secret Placer keeps)")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        if args.exemption_key:
            read_keys(args.exemption_key)
    except ExemptionKeyError as error:
        log.error("%s", error)
        return 1
    try:
        connection = connect(args.kubeconfig, context=args.context)
    except ConnectionSetupError as error:
        log.error("%s", error)
        return 1
    api = KubeApi(connection)
    elector = None
    if not args.no_status:
        elector = LeaseElector(api, namespace=connection.namespace, name=LEASE_NAME, identity=identity())
    key_secret = None
    if not args.exemption_key:  # the workers read the key where the Secret's keeper writes it
        key_secret = ExemptionKeySecret(api, namespace=connection.namespace, state_directory=args.state,
                                        leading=lambda: elector is None or elector.is_leader)
        key_secret.sync()
    seal_keys = SealKeys(args.exemption_key or exemption_key_path(args.state))
    served = served_at_start(api, args.state)
    discovery = DiscoveryRefresh(api, args.state, served)
    # Policies are checked against the API server's own minor, as the workers check them (`field_target`),
    # so the status, the validating webhook and the admissions agree.
    compiler = PolicyCompiler(fields=FieldChecks(served.field_target))
    judging = PolicyCompiler(LeakAccount(int(CEL_LEAK_BUDGET_MIB * 2**20)), fields=FieldChecks(served.field_target))
    background = BackgroundReports(api, args.state, ServedPolicies(args.state, judging),
                                   leading=lambda: elector is None or elector.is_leader,
                                   exhausted=judging.leaks.exhausted, seals=seal_keys.current)
    registration = None
    if args.webhook_configuration:
        registration = WebhookRegistration(
            api, args.webhook_configuration, match_conditions=match_conditions_served(served.major, served.minor),
            files=FilePolicySource(args.policies, compiler=compiler) if args.policies else None)
    controller = ClusterController(api, args.state, compiler=compiler, elector=elector, served=served,
                                   discovery=discovery, background=background,
                                   health=None if args.no_status else _health_round(api, connection.namespace),
                                   registration=registration)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("cluster controller watching %s (%s)", connection.server, served.summary())
    if key_secret is not None:
        threading.Thread(target=key_secret.run, args=(stop,), name="placer-exemption-key", daemon=True).start()
    controller.run(stop)
    return RESTART_TO_FOLLOW_THE_API_SERVER if controller.restart or background.restart else 0


def served_at_start(api: KubeApi, state: Path) -> ServedApis:
    """The API server's version and discovery, written to the state directory; when it cannot be read (the
    API server is away), nothing optional is watched until `DiscoveryRefresh` reads it and restarts."""
    try:
        served = discover(api, features=WATCHED_FEATURES)
    except (ApiError, TransportError) as error:
        log.warning("API discovery failed (%s); optional watches wait for it", error)
        return ServedApis()
    write_served_apis(state, served)
    return served


if __name__ == "__main__":
    sys.exit(main())
