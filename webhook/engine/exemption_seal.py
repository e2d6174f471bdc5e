"""Exemptions that reach the pods of the workloads an exempt user creates: Placer's seal on a template.

`spec.exemptions.users` and `groups` exempt a request. The pods of a workload are not created by its author
but by its controller (a Deployment's by the ReplicaSet controller), so an exemption that stopped at the
workload would leave the controller looping on refused pods. When an exempt request brings a template that an
Enforced policy would otherwise refuse, Placer seals that template: the annotation `placer.dev/exempt` holds
a keyed digest (HMAC-SHA256) of the namespace and the template's `spec`, under a key only Placer has
(`--exemption-key`, else the Secret Placer keeps in its namespace: `webhook.cluster.exemption_key`). Anyone
may copy the annotation; nobody else can compute it for another spec. So:

- a workload whose template carries a seal that verifies against that template's own `spec` is exempt: the
  ReplicaSet the Deployment controller copies from a sealed template, the Job a CronJob makes from one. Any
  change to the spec (a tenant's new image) breaks the seal, and the template is judged again;
- a Pod carries its template's annotations but not its spec unchanged (admission plugins add service account
  volumes, default tolerations, a priority), so a Pod is exempt when a Kubernetes controller creates it
  (`system:kube-controller-manager`, a `kube-system` service account, or `system:masters`: identities a
  tenant cannot take) and its controller owner, read from the API server and matched by uid, has a template
  whose seal verifies.

Without a key no seal is written or honoured: the exemption stays with the request itself, and the answer
warns that the workload's pods will be refused (`NO_KEY_WARNING`).

A key may be replaced: the previous keys still verify (`Seals.previous`), so the seals they made keep working
until their workloads roll; only the current key seals.
"""

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.support.typing import JSONObject, as_map

SEAL_ANNOTATION = "placer.dev/exempt"
SEAL_VERSION = "v1"
MIN_KEY_BYTES = 32
CONTROLLER_MANAGER = "system:kube-controller-manager"
SYSTEM_SERVICE_ACCOUNTS = "system:serviceaccount:kube-system:"
MASTERS = "system:masters"
NO_KEY_WARNING = "exempt, but its pods will be refused: exemptions need Placer's key"
NO_KEY_HINT = " (--exemption-key or --kube)"
WARNING_ROOM = 120 - len("placer: ")

OwnerLookup = Callable[[str, Mapping[str, Any], float | None], JSONObject | None]
"""`(namespace, ownerReference, deadline)`: the owner object, when it exists with that uid; None otherwise."""


@dataclass(frozen=True, slots=True)
class Seals:
    """What the engine needs to write and honour seals: the key, and a way to read a Pod's controller owner."""

    key: bytes
    owner: OwnerLookup | None = None
    previous: tuple[bytes, ...] = ()
    """Keys replaced by `key`: their seals still verify (until their workloads roll); they seal nothing."""

    def verifies(self, namespace: str, template: Mapping[str, Any]) -> bool:
        """Whether the template carries a seal made by the current key or a previous one."""
        return sealed(self.key, namespace, template, previous=self.previous)


@dataclass(frozen=True, slots=True)
class ExemptionKeys:
    """The key that seals and the previous keys that still verify, as a key file or the Secret holds them."""

    key: bytes
    previous: tuple[bytes, ...] = ()

    def seals(self, owner: OwnerLookup | None = None) -> Seals:
        return Seals(self.key, owner, self.previous)

    def text(self) -> str:
        """The key file's text: the current key on the first line, each previous key on a line of its own."""
        return "".join(f"{key.decode()}\n" for key in (self.key, *self.previous))


class ExemptionKeyError(ValueError):
    """The exemption key file cannot be used (missing, unreadable, too short)."""


def no_key_warning(template: str) -> str:
    """The answer to an exempt request whose template would need a seal that cannot be made (no key and no
    cluster): the workload is admitted, and its controller's pods will be refused; said, rather than a stall.
    Under 120 characters with its `placer:` prefix; the hint goes first when a template's name is long."""
    warning = f"template {template}: {NO_KEY_WARNING}" if template else NO_KEY_WARNING
    return warning + NO_KEY_HINT if len(warning + NO_KEY_HINT) <= WARNING_ROOM else warning[:WARNING_ROOM]


def read_key(path: Path) -> bytes:
    """The current key in `path` (`read_keys`)."""
    return read_keys(path).key


def read_keys(path: Path) -> ExemptionKeys:
    """The keys in `path`: the first line seals, the following lines are previous keys that still verify."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ExemptionKeyError(f"{path}: {error.strerror or error}") from None
    return parse_keys(data, str(path))


def parse_keys(data: bytes, where: str, previous: bytes = b"") -> ExemptionKeys:
    """The keys of a key file's content (or of a Secret's `key`, with its `previous`): one a line, surrounding
    whitespace dropped, each at least 32 bytes, as `openssl rand -hex 32` writes one."""
    lines = [line.strip() for line in (data + b"\n" + previous).splitlines() if line.strip()]
    if not lines:
        raise ExemptionKeyError(f"{where}: empty; an exemption key needs at least {MIN_KEY_BYTES} bytes")
    for number, key in enumerate(lines, 1):
        if len(key) < MIN_KEY_BYTES:
            what = "the key" if number == 1 else f"previous key {number - 1}"
            raise ExemptionKeyError(f"{where}: {what}: {len(key)} bytes; an exemption key needs at least "
                                    f"{MIN_KEY_BYTES}")
    return ExemptionKeys(lines[0], tuple(dict.fromkeys(lines[1:])))


def seal(key: bytes, namespace: str, template: Mapping[str, Any]) -> str:
    """The annotation value sealing `template`'s spec in `namespace`."""
    spec = json.dumps(as_map(template.get("spec")), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hmac.new(key, f"{SEAL_VERSION}\0{namespace}\0{spec}".encode(), hashlib.sha256).digest()
    return f"{SEAL_VERSION}.{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"


def sealed(key: bytes | None, namespace: str, template: Mapping[str, Any], *,
           previous: Sequence[bytes] = ()) -> bool:
    """Whether the template carries a seal Placer wrote for exactly this spec in this namespace, with `key` or
    one of the `previous` keys it replaced."""
    if key is None:
        return False
    value = as_map(as_map(template.get("metadata")).get("annotations")).get(SEAL_ANNOTATION)
    return isinstance(value, str) and any(hmac.compare_digest(value, seal(one, namespace, template))
                                          for one in (key, *previous))


def a_controller(user_info: Mapping[str, Any]) -> bool:
    """The request comes from Kubernetes' controllers (or a cluster admin), never from a tenant."""
    username = user_info.get("username")
    groups = user_info.get("groups")
    return (username == CONTROLLER_MANAGER
            or (isinstance(username, str) and username.startswith(SYSTEM_SERVICE_ACCOUNTS))
            or (isinstance(groups, list) and MASTERS in groups))


def pod_sealed(seals: Seals | None, namespace: str, user_info: Mapping[str, Any], pod: Mapping[str, Any], *,
               templates: Callable[[JSONObject], list[JSONObject]] | None, deadline: float | None) -> str | None:
    """Why a Pod being created is exempt by its owner's seal, or None: a Kubernetes controller creates it and
    its controller owner (read through `seals.owner`, matched by uid) has a template sealed by an exempt
    request. `templates` gives the owner's pod templates (None: the owner is not a kind Placer knows)."""
    if seals is None or seals.owner is None or templates is None or not a_controller(user_info):
        return None
    owner_ref = next((ref for ref in _list(as_map(pod.get("metadata")).get("ownerReferences"))
                      if isinstance(ref, dict) and ref.get("controller")), None)
    if owner_ref is None:
        return None
    owner = seals.owner(namespace, owner_ref, deadline)
    if owner is None:
        return None
    for template in templates(owner):
        if seals.verifies(namespace, template):
            return (f"created by {user_info.get('username')} for {owner_ref.get('kind')}/{owner_ref.get('name')}, "
                    "whose template an exempt request sealed")
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
