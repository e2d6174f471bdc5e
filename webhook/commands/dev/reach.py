"""Which address of this machine the API server can call: asked of the API server itself.

Only the API server knows which of this machine's addresses it can dial: a kube-apiserver process on this
machine dials 127.0.0.1; kind's, in a container, dials the docker network's gateway or the LAN address; a VM
or a lab cluster dials the address on this machine's route to it. So `placer dev` does not guess. With
`placer serve` already answering, it registers a ValidatingWebhookConfiguration `placer-dev-probe` with one
webhook per candidate address (`failurePolicy: Fail`, each selecting only a dry-run SchedulingPolicy labelled
with its index) and sends each candidate its dry run. The policy does not compile, so a webhook that reached
Placer is refused by Placer, and the API server says which webhook refused it; one it could not reach is
`failed calling webhook` with the dial error. Both statuses are built in kube-apiserver's
`staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/validating/dispatcher.go` (`callHook`,
`Dispatch`) and `.../webhook/errors/statuserror.go` (`ToStatusErr`). A dry run stores nothing.

Another validating webhook on SchedulingPolicies (a real Placer install's) refuses the probe policy too, and
the API server calls the webhooks at once and returns the first refusal: a candidate is asked again until
the refusal the API server returns is its probe webhook's.
"""

import ipaddress
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.commands.dev.manifests import VALIDATING_PATH, DevError, webhook_url

PROBE_NAME = "placer-dev-probe"
PROBE_LABEL = "placer.dev/dev-probe"
PROBE_TIMEOUT_SECONDS = 2
"""Per candidate: an address that drops packets costs this long (the webhook's `timeoutSeconds`)."""
ACTIVATION_TIMEOUT = 30.0
"""Seconds for the API server to start calling a new webhook configuration (it loads them from a watch)."""
SETTLE_TIMEOUT = 10.0
"""Seconds to wait, for a later candidate, until the refusal is the probe webhook's and not another's."""
POLICIES_PATH = "/apis/placer.dev/v1alpha1/schedulingpolicies"
CONTAINER_HOST_NAMES = ("host.docker.internal", "host.minikube.internal")
"""What a cluster in containers calls the machine it runs on (Docker Desktop, minikube), tried last:
https://docs.docker.com/desktop/features/networking/, https://minikube.sigs.k8s.io/docs/handbook/host-access/."""
SIOCGIFADDR = 0x8915
"""Linux's ioctl for an interface's IPv4 address (`include/uapi/linux/sockios.h`)."""


def route_address(server: str) -> str | None:
    """This machine's address on its route to the API server `server` (a URL), or None without a route.

    A UDP `connect` sends nothing; it only makes the kernel choose the source address (127.0.0.1 for an API
    server on loopback)."""
    parsed = urlparse(server)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 443
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return str(probe.getsockname()[0])
    except OSError:
        return None


def interface_addresses() -> list[str]:
    """The IPv4 addresses of this machine's interfaces, loopback and link-local left out (the docker bridges
    and the LAN address); on another system than Linux, the addresses its host name resolves to."""
    found: list[str] = []
    if sys.platform == "linux":
        import fcntl  # noqa: PLC0415 (POSIX only)

        for _, name in socket.if_nameindex():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                try:
                    packed = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
                except OSError:  # no IPv4 address on this interface
                    continue
            found.append(socket.inet_ntoa(packed[20:24]))
    else:
        try:
            found = [str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
        except OSError:
            found = []
    return [address for address in found
            if not ipaddress.ip_address(address).is_loopback and not ipaddress.ip_address(address).is_link_local]


def candidate_hosts(server: str, addresses: Callable[[], list[str]] = interface_addresses) -> list[str]:
    """The addresses to ask the API server about, most likely first: the one on the route to it (127.0.0.1
    for a local API server), this machine's other addresses, then the names containers use for it."""
    route = route_address(server)
    return list(dict.fromkeys([*([route] if route else []), *addresses(), *CONTAINER_HOST_NAMES]))


def probe_configuration(hosts: Sequence[str], port: int, ca_bundle: str) -> dict[str, Any]:
    """`placer-dev-probe`: webhook `probe-<i>.placer.dev` calls `/validate` at `hosts[i]`, for dry-run
    SchedulingPolicies labelled `placer.dev/dev-probe: "<i>"` only."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": PROBE_NAME, "labels": {"app.kubernetes.io/managed-by": "placer-dev"}},
        "webhooks": [{
            "name": f"probe-{index}.placer.dev",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS, "matchPolicy": "Equivalent",
            "clientConfig": {"url": webhook_url(host, port) + "/validate", "caBundle": ca_bundle},
            "objectSelector": {"matchLabels": {PROBE_LABEL: str(index)}},
            "rules": [{"apiGroups": ["placer.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE"],
                       "resources": ["schedulingpolicies"], "scope": "Cluster"}],
        } for index, host in enumerate(hosts)],
    }


def probe_policy(index: int) -> dict[str, Any]:
    """A SchedulingPolicy the CRD's schema takes and Placer refuses (its condition does not parse)."""
    return {
        "apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": f"{PROBE_NAME}-{index}", "labels": {PROBE_LABEL: str(index)}},
        "spec": {"rules": [{"name": "probe", "condition": "placer dev probe", "action": "add-labels",
                            "parameters": {"placer-dev-probe": "true"}}]},
    }


@dataclass(frozen=True, slots=True)
class Answer:
    """What the API server said of one candidate: reached, not reached (and why), or not yet asked."""

    reached: bool
    detail: str = ""
    settled: bool = True
    """False while the API server has not started calling the probe webhooks (nor refused for another reason)."""


def ask(api: KubeApi, index: int) -> Answer:
    """The dry run of candidate `index`'s probe policy, read for what the API server did with it."""
    webhook = f"probe-{index}.placer.dev"
    try:
        api.create(POLICIES_PATH, probe_policy(index), {"dryRun": "All"})
    except ApiError as error:
        if f'admission webhook "{webhook}" denied the request' in error.message:
            return Answer(True)
        if f'failed calling webhook "{webhook}"' in error.message:
            return Answer(False, error.message.split(f'failed calling webhook "{webhook}": ', 1)[-1])
        return Answer(False, error.message, settled=False)
    except TransportError as error:
        return Answer(False, str(error), settled=False)
    return Answer(False, "the API server admitted the dry run without calling the probe webhook", settled=False)


def reachable_host(api: KubeApi, hosts: Sequence[str], port: int, ca_bundle: str,
                   report: Callable[[str], None], *, stopped: Callable[[], bool] = lambda: False) -> str:
    """The first of `hosts` the API server reaches Placer at (on `port`, trusting `ca_bundle`). Every host it
    cannot reach is reported with the API server's own reason; none reachable is a DevError."""
    configuration = probe_configuration(hosts, port, ca_bundle)
    _put(api, configuration)
    try:
        for index, host in enumerate(hosts):
            # The first answer waits for the API server to load the configuration; a later one only for a
            # refusal by another webhook (a real Placer install refuses the probe policy too) to come second.
            answer = _settled(api, index, ACTIVATION_TIMEOUT if index == 0 else SETTLE_TIMEOUT, stopped)
            if not answer.settled:
                raise DevError(f"cannot tell whether the API server reaches {webhook_url(host, port)}: "
                               f"{answer.detail}")
            if answer.reached:
                return host
            report(f"the API server cannot reach {webhook_url(host, port)}: {answer.detail}")
    finally:
        try:
            api.delete(f"{VALIDATING_PATH}/{PROBE_NAME}")
        except ApiError as error:
            if error.code != 404:
                report(f"could not delete ValidatingWebhookConfiguration {PROBE_NAME}: {error}")
    tried = ", ".join(hosts)
    raise DevError(
        f"the API server reaches none of {tried} on port {port}: give --host, the name or IP it reaches this "
        "machine at (and let the cluster through a firewall on this machine to that port)")


def _settled(api: KubeApi, index: int, timeout: float, stopped: Callable[[], bool]) -> Answer:
    """Ask about candidate `index` until the answer is the probe webhook's own, or `timeout` passed."""
    deadline = time.monotonic() + timeout
    answer = ask(api, index)
    while not answer.settled and time.monotonic() < deadline and not stopped():
        time.sleep(0.2)
        answer = ask(api, index)
    return answer


def _put(api: KubeApi, configuration: dict[str, Any]) -> None:
    """Create the probe configuration, replacing one a killed session left."""
    try:
        api.create(VALIDATING_PATH, configuration)
    except ApiError as error:
        if error.code != 409:
            raise DevError(f"creating ValidatingWebhookConfiguration {PROBE_NAME}: {error}") from None
        current = api.get(f"{VALIDATING_PATH}/{PROBE_NAME}")
        metadata = {**configuration["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        api.replace(f"{VALIDATING_PATH}/{PROBE_NAME}", {**configuration, "metadata": metadata})
