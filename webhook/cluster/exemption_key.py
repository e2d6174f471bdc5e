"""The exemption key Placer makes and keeps itself: the Secret `placer-exemption-key` in its own namespace.

Exemption seals (`webhook.engine.exemption_seal`) need one key that every replica and every worker shares: a
Pod sealed through one replica is admitted by whichever replica the API server calls next. Without
`--exemption-key FILE`, the controller process of each replica reads that key from the Secret and writes it to
its state directory (`exemption.key`, mode 0600), where its workers read it (`webhook.admission.seal_keys`):
workers make no API call for it, and a worker never seals with a key of its own.

Only the leader (the holder of the status Lease) creates the Secret, once, when it does not exist; the other
replicas wait for it. Should two create it at once (no election with `--no-status`, or a leader change in
between), the API server takes one create and answers the other `409 AlreadyExists`
(staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go, `Store.Create`): that one reads the
Secret the first made. RBAC cannot limit `create` by name (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources),
so the Role grants `create` on Secrets in Placer's namespace and `get` on this one name only
(deploy/base/rbac.yaml).

The Secret holds `key` (the key that seals) and, after a rotation, `previous` (the keys it replaced, one a
line): seals made by a previous key keep verifying until their workloads roll (docs/install.md). Each replica
reads the Secret again every `REFRESH_INTERVAL` seconds; a Secret that is gone is made again (by the leader,
with a new key); one that cannot be used (a key under 32 bytes) turns seals off, loudly, rather than sealing
with anything else.
"""

import base64
import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.engine.exemption_seal import ExemptionKeyError, ExemptionKeys, parse_keys
from webhook.policy.state.cluster_state import exemption_key_path
from webhook.policy.state.shards import write_atomically

log = logging.getLogger(__name__)

SECRET_NAME = "placer-exemption-key"
KEY_FIELD = "key"
PREVIOUS_FIELD = "previous"
REFRESH_INTERVAL = 10.0
"""Seconds between two reads of the Secret once the key is known (a rotation reaches every replica by then)."""
WAIT_INTERVAL = 1.0
"""Seconds between two reads while the Secret is not there yet (the leader is about to make it)."""
ERROR_CEILING = 60.0
"""The longest wait after a failed read (forbidden, API server away): doubled from WAIT_INTERVAL."""
MANAGED_BY = {"app.kubernetes.io/name": "placer", "app.kubernetes.io/managed-by": "placer"}


def new_key() -> bytes:
    """A fresh key, as `openssl rand -hex 32` writes one: 32 random bytes, in hex."""
    return secrets.token_hex(32).encode()


def keys_of(secret: Mapping[str, Any]) -> ExemptionKeys:
    """The keys a Secret holds (`key`, and `previous` after a rotation); ExemptionKeyError when unusable."""
    data = secret.get("data") if isinstance(secret.get("data"), dict) else {}
    assert isinstance(data, dict)
    where = f"Secret {SECRET_NAME}"

    def field(name: str) -> bytes:
        value = data.get(name)
        if value is None:
            return b""
        try:
            return base64.b64decode(str(value), validate=True)
        except ValueError:
            raise ExemptionKeyError(f"{where}: data.{name} is not base64") from None

    if not data.get(KEY_FIELD):
        raise ExemptionKeyError(f"{where}: no data.{KEY_FIELD}")
    return parse_keys(field(KEY_FIELD), where, previous=field(PREVIOUS_FIELD))


class ExemptionKeySecret:
    """Reads (and, leading, creates) the Secret; writes its keys where the workers read them."""

    def __init__(self, api: KubeApi, *, namespace: str, state_directory: Path, leading: Callable[[], bool],
                 generate: Callable[[], bytes] = new_key) -> None:
        self._api = api
        self._namespace = namespace
        self._collection = f"/api/v1/namespaces/{namespace}/secrets"
        self._path = f"{self._collection}/{SECRET_NAME}"
        self._file = exemption_key_path(state_directory)
        self._leading = leading
        self._generate = generate
        self._written: str | None = None
        self._reported: str | None = None
        self._delay = WAIT_INTERVAL
        self.keys: ExemptionKeys | None = None
        """The keys as last read; None until the Secret was read (or while it cannot be used)."""

    def sync(self) -> float:
        """One round: read the Secret (create it when missing and leading), publish its keys to the workers.
        Returns the seconds to wait before the next round. Never raises."""
        try:
            secret = self._read_or_create()
        except (ApiError, TransportError) as error:
            self._report(f"cannot read Secret {self._namespace}/{SECRET_NAME} ({error}): exemptions stay with "
                         "the request until it can (deploy/base/rbac.yaml grants it)")
            self._delay = min(self._delay * 2, ERROR_CEILING)
            return self._delay
        self._delay = WAIT_INTERVAL
        if secret is None:
            return WAIT_INTERVAL  # the leader makes it
        try:
            keys = keys_of(secret)
        except ExemptionKeyError as error:
            self._publish(None)
            self._report(f"exemption seals are off: {error}")
            return REFRESH_INTERVAL
        if self._publish(keys):
            self._reported = None
        return REFRESH_INTERVAL

    def run(self, stop: threading.Event) -> None:
        """Rounds until `stop`."""
        while not stop.wait(self.sync()):
            pass

    def _read_or_create(self) -> Mapping[str, Any] | None:
        try:
            return self._api.get(self._path)
        except ApiError as error:
            if error.code != 404:
                raise
        if not self._leading():
            return None
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": SECRET_NAME, "namespace": self._namespace, "labels": dict(MANAGED_BY)},
                "data": {KEY_FIELD: base64.b64encode(self._generate() + b"\n").decode()}}
        try:
            created = self._api.create(self._collection, body)
        except ApiError as error:
            if error.code != 409:
                raise
            return self._api.get(self._path)  # another replica made it first: its key is the one
        log.info("created Secret %s/%s: the key of exemption seals", self._namespace, SECRET_NAME)
        return created

    def _publish(self, keys: ExemptionKeys | None) -> bool:
        """Write the keys where the workers read them (remove the file for None); False when it failed."""
        self.keys = keys
        text = keys.text() if keys is not None else None
        if text == self._written:
            return True
        try:
            if text is None:
                self._file.unlink(missing_ok=True)
            else:
                write_atomically(self._file, text.encode())
        except OSError as error:  # the state directory full or gone (the process stopping): the next round
            self._report(f"exemption key not written to the workers' state: {error}")
            return False
        if text is not None:
            log.info("exemption key from Secret %s/%s%s", self._namespace, SECRET_NAME,
                     f" (and {len(keys.previous)} previous)" if keys is not None and keys.previous else "")
        self._written = text
        return True

    def _report(self, problem: str) -> None:
        if problem != self._reported:
            self._reported = problem
            log.error("%s", problem)
