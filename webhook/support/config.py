"""Settings of `placer serve`, frozen once the command line and environment are read.

Nothing reads configuration at import time: the CLI builds a Settings and passes it down explicitly.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

OptIn = Literal["api-server", "label-or-annotation"]

DEFAULT_POLICIES = "./policies"
DEFAULT_CERTS = Path("./certs")
MAX_BODY_BYTES = 8 * 1024 * 1024
READ_TIMEOUT_SECONDS = 10.0
IDLE_TIMEOUT_SECONDS = 60.0
CEL_LEAK_BUDGET_MIB = 64
WORKER_MAX_RSS_MIB = 160


@dataclass(frozen=True, slots=True)
class Settings:
    policies: tuple[str, ...] = (DEFAULT_POLICIES,)
    policies_explicit: bool = False
    """Whether --policies was given: only then is a missing path an error."""
    bind: str = "127.0.0.1:8443"
    tls_cert: Path = DEFAULT_CERTS / "tls.crt"
    tls_key: Path = DEFAULT_CERTS / "tls.key"
    client_ca: Path | None = None
    workers: int = 2
    worker_max_rss_mib: int | None = None
    """Replace a worker (gracefully: the new one first) whose resident memory stays above this."""
    worker_lifetime: int | None = None
    """Replace a worker (gracefully) this many seconds after it started; at least 60."""
    rss_sample_interval: int = 10
    """Seconds between two looks at the workers' resident memory."""
    log_level: str = "info"
    opt_in: OptIn = "api-server"
    reload_interval: float = 1.0
    kubeconfig: Path | None = None
    context: str | None = None
    """The kubeconfig context (`--context`); None: the kubeconfig's current one."""
    cluster_state: Path | None = None
    """The state directory the cluster controller writes and workers read; None without `--kube`."""
    webhook_configuration: str | None = None
    """The MutatingWebhookConfiguration whose rules the controller keeps to what the policies can act on
    (`webhook.cluster.registration`); None: left as installed."""
    exemption_key: Path | None = None
    """The file holding the key of exemption seals (`--exemption-key`); None: exemptions stay with the request."""
    max_body_bytes: int = MAX_BODY_BYTES
    read_timeout: float = READ_TIMEOUT_SECONDS
    """Seconds a client has to send a request's body once its head has come, before it is answered 408 and cut off."""
    idle_timeout: float = IDLE_TIMEOUT_SECONDS
    """Seconds a connection may wait for its next request's head to arrive in full, idle or trickling: then it is
    closed (granian's HTTP/1 header read timeout, at most 60)."""
    cel_leak_budget_mib: float = CEL_LEAK_BUDGET_MIB
    """What Kubernetes' CEL library calls may leak in one worker before it is replaced (cel_libraries.leaks);
    each worker draws its own budget, up to a quarter lower, so that workers are not replaced together."""

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.bind.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)
