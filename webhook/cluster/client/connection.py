"""Where the API server is and how to authenticate: the one module that imports the `kubernetes` client.

The client is used for what it does best, reading in-cluster service-account credentials and kubeconfig files
(client certificates, tokens, exec plugins, token refresh). Requests themselves go through `webhook.cluster.client.api`,
which streams watches line by line and leaves retries and backoff to the reflector.
"""

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEASE_NAMESPACE = "placer-system"
"""Where Placer's Lease lives when it does not run in a Pod (`POD_NAMESPACE` overrides)."""
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True, slots=True)
class ClusterConnection:
    server: str
    """Base URL, e.g. https://10.96.0.1:443."""
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    verify: bool
    tls_server_name: str | None
    namespace: str
    """The namespace Placer runs in (service account, `POD_NAMESPACE`, else placer-system): where its Lease lives."""
    authorization: Callable[[], str | None]
    """The Authorization header value, fetched per request so rotated tokens are used."""


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def connect(kubeconfig: Path | None, *, context: str | None = None) -> ClusterConnection:
    """Credentials from `kubeconfig`, else in-cluster ones when running in a Pod, else the default kubeconfig;
    `context` picks a kubeconfig context other than the current one (as kubectl's `--context`).

    Raises `ConnectionSetupError` with the loader's message when no usable configuration is found.
    """
    from kubernetes import client, config  # noqa: PLC0415 - heavy; only the cluster controller needs it

    configuration = client.Configuration()
    try:
        if kubeconfig is None and context is None and in_cluster():
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            namespace = _service_account_namespace()
        else:
            path = str(kubeconfig) if kubeconfig else None
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=configuration, persist_config=False
            )
            # Out of the cluster the Lease still lives where the docs and RBAC put it, never in the
            # kubeconfig context's namespace (often `default`).
            namespace = LEASE_NAMESPACE
    except (config.ConfigException, OSError, ValueError, TypeError) as error:
        raise ConnectionSetupError(f"no usable Kubernetes configuration: {error}") from None
    namespace = os.environ.get("POD_NAMESPACE") or namespace

    def authorization() -> str | None:
        settings: Mapping[str, Any] = configuration.auth_settings()
        bearer = settings.get("BearerToken")
        return str(bearer["value"]) if bearer and bearer.get("value") else None

    return ClusterConnection(
        server=str(configuration.host).rstrip("/"),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=bool(configuration.verify_ssl),
        tls_server_name=getattr(configuration, "tls_server_name", None),
        namespace=namespace,
        authorization=authorization,
    )


def identity() -> str:
    """Who holds the Lease: the Pod name (downward API or hostname) and the process id."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}"


def _service_account_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or LEASE_NAMESPACE
    except OSError:
        return LEASE_NAMESPACE


class ConnectionSetupError(RuntimeError):
    """No kubeconfig or in-cluster credentials could be loaded."""
