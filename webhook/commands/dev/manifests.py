"""What `placer dev` installs, rendered from `deploy/`: the SchedulingPolicy CRD and both webhook
configurations of `deploy/base` (registered by URL), and the PolicyReport CRDs of
`deploy/components/policy-reports`.

The webhook configurations keep the rules, selectors, failure policies and timeouts of `deploy/base`, so the
dev install stays in step with the real one; only `clientConfig` and the names differ. Every CRD is labelled
`app.kubernetes.io/managed-by: placer-dev`, so that a later session knows it made it.
"""

import copy
from pathlib import Path
from typing import Any

import yaml

DEV_NAME = "placer-dev"
"""Name of the dev webhook configurations: never `placer`, so a real install is never replaced or deleted."""
DEFAULT_MANIFESTS = Path(__file__).resolve().parents[3] / "deploy" / "base"
REPORTS_COMPONENT = Path("components") / "policy-reports"
"""Where the report CRDs are, from the parent of `--manifests` (deploy/)."""
REPORT_CRD_FILES = ("policyreports.yaml", "clusterpolicyreports.yaml")
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
MUTATING_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
NAMESPACE_PATH = "/api/v1/namespaces"
COLLECTIONS = {
    "CustomResourceDefinition": CRD_PATH,
    "MutatingWebhookConfiguration": MUTATING_PATH,
    "ValidatingWebhookConfiguration": VALIDATING_PATH,
    "Namespace": NAMESPACE_PATH,
}
MANAGED_BY = "app.kubernetes.io/managed-by"
DEV_MANAGER = "placer-dev"
"""The `MANAGED_BY` value of what `placer dev` created."""
PLACER_MANAGER = "placer"
"""The `MANAGED_BY` value of the objects Placer itself writes (its PolicyReports)."""


class DevError(RuntimeError):
    """A clear, one-line reason `placer dev` cannot go on."""


def webhook_url(host: str, port: int) -> str:
    """`https://host:port`, an IPv6 address in brackets."""
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def load(path: Path) -> list[dict[str, Any]]:
    """The documents of a YAML file; a missing file is a DevError naming the flag that points at it."""
    try:
        return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    except OSError as error:
        raise DevError(f"cannot read {path}: {error.strerror} (give --manifests DIR: deploy/base)") from None


def labelled_crd(document: dict[str, Any]) -> dict[str, Any]:
    """A CRD of deploy/ with the label saying `placer dev` made it."""
    copied = copy.deepcopy(document)
    metadata = copied["metadata"]
    copied["metadata"] = {**metadata, "labels": {**(metadata.get("labels") or {}), MANAGED_BY: DEV_MANAGER}}
    return copied


def crds(manifests: Path, *, reports: bool) -> list[dict[str, Any]]:
    """The SchedulingPolicy CRD of `manifests` and, with `reports`, the PolicyReport CRDs of the
    policy-reports component beside it, each labelled as made by `placer dev`."""
    documents = load(manifests / "crd.yaml")
    if reports:
        component = manifests.parent / REPORTS_COMPONENT
        for name in REPORT_CRD_FILES:
            documents.extend(load(component / name))
    found = [labelled_crd(doc) for doc in documents if doc.get("kind") == "CustomResourceDefinition"]
    if not found:
        raise DevError(f"no CustomResourceDefinition in {manifests}/crd.yaml")
    return found


def webhook_configurations(manifests: Path, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Both webhook configurations of `manifests`/webhooks.yaml, named `placer-dev` and registered at `url`
    (+ the service's path) with `ca_bundle`; everything else as deploy/base has it."""
    rendered = []
    for document in load(manifests / "webhooks.yaml"):
        if document.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        copied = copy.deepcopy(document)
        copied["metadata"] = {**copied["metadata"], "name": DEV_NAME}
        for webhook in copied["webhooks"]:
            path = webhook["clientConfig"].get("service", {}).get("path", "")
            webhook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
        rendered.append(copied)
    if not any(d["kind"] == "MutatingWebhookConfiguration" for d in rendered):
        raise DevError(f"no MutatingWebhookConfiguration in {manifests}/webhooks.yaml")
    return rendered


def dev_manifests(manifests: Path, url: str, ca_bundle: str, *, reports: bool = False) -> list[dict[str, Any]]:
    """Everything `placer dev` installs, in the order it installs it: the CRDs, then the webhooks."""
    return [*crds(manifests, reports=reports), *webhook_configurations(manifests, url, ca_bundle)]


def crd_objects_path(crd: dict[str, Any]) -> str:
    """The path listing every object of `crd` (all namespaces), in its storage version."""
    spec = crd["spec"]
    version = next((v["name"] for v in spec["versions"] if v.get("storage")), spec["versions"][0]["name"])
    return f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
