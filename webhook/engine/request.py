"""What the engine is asked: the fields of an AdmissionReview's `request` that Placer uses, checked for type.

The admission path decodes a review into this (`webhook.admission.review.parse_review`); `placer apply` and the
reports build one for a stored object. It sits with the engine, its first reader, so that every layer that
runs the engine can name it.
"""

from dataclasses import dataclass, field
from typing import Literal

from webhook.support.typing import JSONObject

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The fields of `request` Placer uses, checked for type."""

    api_version: str
    uid: str
    group: str
    version: str
    kind: str
    resource: JSONObject
    sub_resource: str
    name: str
    namespace: str
    operation: Operation
    user_info: JSONObject
    dry_run: bool
    object: JSONObject | None
    old_object: JSONObject | None
    fields: JSONObject = field(default_factory=dict)
    """Every other field of the request as the API server sent it (requestKind, options, userInfo.extra...)."""
    stored: bool = False
    """Not from an API server: a stored workload judged as its CREATE (reports, `drift`), whose pods may
    already run (a native gang is then not added: `webhook.gang.native_lifecycle`)."""

    def with_uid(self, uid: str) -> "AdmissionRequest":
        """The same request under another uid (a sibling Pod's: `webhook.admission.sibling_cache`); what
        `dataclasses.replace` does at half its cost."""
        return AdmissionRequest(self.api_version, uid, self.group, self.version, self.kind, self.resource,
                                self.sub_resource, self.name, self.namespace, self.operation, self.user_info,
                                self.dry_run, self.object, self.old_object, self.fields, self.stored)

    def as_cel(self) -> JSONObject:
        """The `request` CEL variable: the admission.k8s.io/v1 AdmissionRequest without object and oldObject,
        as in Kubernetes' admission policies. Fields the API server leaves out read as their empty value."""
        kind = {"group": self.group, "version": self.version, "kind": self.kind}
        return {
            "requestKind": kind,
            "requestResource": self.resource,
            "requestSubResource": self.sub_resource,
            "options": {},
            **self.fields,
            "uid": self.uid,
            "operation": self.operation,
            "name": self.name,
            "namespace": self.namespace,
            "kind": kind,
            "resource": self.resource,
            "subResource": self.sub_resource,
            "userInfo": {"username": "", "uid": "", "groups": [], "extra": {}, **self.user_info},
            "dryRun": self.dry_run,
        }
