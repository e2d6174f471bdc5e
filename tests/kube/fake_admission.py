"""The fake API server's validating admission: the ValidatingWebhookConfigurations stored in it are called
for a create that their rules and object selector match, over HTTPS trusting only their `caBundle`, and
their failures and refusals come back as kube-apiserver words them.

What kube-apiserver does, and what is copied here:
- a webhook it cannot call (`failurePolicy: Fail`) gives 500 InternalError, `Internal error occurred: failed
  calling webhook "<name>": failed to call webhook: Post "<url>?timeout=<n>s": <dial error>` (`callHook` and
  `Dispatch` in staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/validating/dispatcher.go, the
  message of `ErrCallingWebhook` in staging/src/k8s.io/apiserver/pkg/util/webhook/error.go);
- a refusal keeps the webhook's code (403 when it gives none) and says `<resource>.<group> "<name>" is
  forbidden: admission webhook "<name>" denied the request: <message>` (`ToStatusErr` in
  staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go).
Only `matchLabels` object selectors and exact rules (no `*`) are understood: what Placer's configurations use.
"""

import base64
import json
import ssl
import urllib.error
import urllib.request
import uuid
from typing import Any

VALIDATING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def _matches(webhook: dict[str, Any], group: str, version: str, resource: str, obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    wanted = (webhook.get("objectSelector") or {}).get("matchLabels") or {}
    if any(labels.get(key) != value for key, value in wanted.items()):
        return False
    return any(group in rule.get("apiGroups", []) and version in rule.get("apiVersions", [])
               and resource in rule.get("resources", []) and "CREATE" in rule.get("operations", [])
               for rule in webhook.get("rules") or [])


def _review(group: str, version: str, resource: str, obj: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    kind = {"group": group, "version": version, "kind": obj.get("kind", "")}
    where = {"group": group, "version": version, "resource": resource}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": kind, "resource": where, "requestKind": kind, "requestResource": where,
        "name": obj["metadata"]["name"], "operation": "CREATE",
        "userInfo": {"username": "placer-test", "groups": ["system:masters", "system:authenticated"]},
        "object": obj, "oldObject": None, "dryRun": dry_run,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}


def _call(webhook: dict[str, Any], review: dict[str, Any]) -> dict[str, Any]:
    """The webhook's answer; OSError (URLError included) when it cannot be called."""
    client = webhook["clientConfig"]
    timeout = int(webhook.get("timeoutSeconds", 10))
    context = ssl.create_default_context(cadata=base64.b64decode(client["caBundle"]).decode())
    request = urllib.request.Request(f"{client['url']}?timeout={timeout}s", data=json.dumps(review).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, context=context, timeout=timeout) as answer:
        return dict(json.loads(answer.read())["response"])


def validate_create(configurations: dict[str, dict[str, Any]], collection: str, obj: dict[str, Any],
                    dry_run: bool) -> tuple[int, dict[str, Any]] | None:
    """The status refusing the create of `obj` into `collection` (an /apis/group/version/resource path), or
    None when every matching validating webhook allowed it."""
    _, _, group, version, resource = collection.split("/")[:5]
    for configuration in configurations.values():
        for webhook in configuration.get("webhooks") or []:
            if not _matches(webhook, group, version, resource, obj):
                continue
            try:
                response = _call(webhook, _review(group, version, resource, obj, dry_run))
            except OSError as error:  # TimeoutError and URLError included
                if webhook.get("failurePolicy", "Fail") == "Ignore":
                    continue
                reason = error.reason if isinstance(error, urllib.error.URLError) else error
                message = (f'Internal error occurred: failed calling webhook "{webhook["name"]}": failed to call '
                           f'webhook: Post "{webhook["clientConfig"]["url"]}?timeout='
                           f'{webhook.get("timeoutSeconds", 10)}s": {reason}')
                return 500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                             "message": message, "reason": "InternalError",
                             "details": {"causes": [{"message": message}]}, "code": 500}
            if response.get("allowed"):
                continue
            result = response.get("status") or {}
            code = int(result.get("code") or 403)
            denied = f'admission webhook "{webhook["name"]}" denied the request'
            denied += f": {result['message']}" if result.get("message") else " without explanation"
            message = f'{resource}.{group} "{obj["metadata"]["name"]}" is forbidden: {denied}'
            details = result.get("details") or {"name": obj["metadata"]["name"], "group": group, "kind": resource}
            return code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": message, "reason": result.get("reason") or "Forbidden", "code": code,
                          "details": details}
    return None
