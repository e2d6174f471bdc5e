"""What Placer reads of DRA objects exists, with the same shape, in every supported minor: each minor's
published OpenAPI schemas (the `kubernetes-validate` package's copy of Kubernetes' `api/openapi-spec`)
accept, in strict mode, the fields `webhook.pods.dra` reads, and `resource.k8s.io/v1` is new in 1.34 (KEP-4381,
DRA structured parameters, GA in v1.34)."""

from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import FIXTURES
from webhook.pods.dra import CLASS_KIND, TEMPLATE_KIND, class_entry, device_entry

SUPPORTED = ("1.34", "1.35", "1.36", "1.37")
ONE_GPU = yaml.safe_load((FIXTURES / "kube-1.36" / "manifests" / "resourceclaimtemplate-one-gpu.yaml").read_text())
EVERY_SHAPE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1", "kind": TEMPLATE_KIND, "metadata": {"name": "mixed", "namespace": "ml"},
    "spec": {"spec": {"devices": {"requests": [
        {"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
        {"name": "admin", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}},
        {"name": "either", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2},
            {"name": "small", "deviceClassName": "mig.nvidia.com"}]},
    ]}}},
}
AMD_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": CLASS_KIND, "metadata": {"name": "gpu.amd.com"},
             "spec": {"extendedResourceName": "amd.com/gpu"}}


@pytest.mark.parametrize("minor", SUPPORTED)
def test_every_field_placer_reads_is_in_the_minors_published_schema(minor: str) -> None:
    for obj in (ONE_GPU, EVERY_SHAPE, AMD_CLASS):
        kubernetes_validate.validate(obj, f"{minor}.0", strict=True)
    assert device_entry(ONE_GPU, TEMPLATE_KIND) == {"devices": {"gpu.nvidia.com": 1}}
    assert device_entry(EVERY_SHAPE, TEMPLATE_KIND) == {"devices": {"gpu.nvidia.com": 3}}
    assert class_entry(AMD_CLASS) == {"extendedResourceName": "amd.com/gpu"}


def test_a_misspelt_field_is_refused_by_the_same_check() -> None:
    misspelt = {**AMD_CLASS, "spec": {"extendedResourceNam": "amd.com/gpu"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, "1.36.0", strict=True)


def test_resource_k8s_io_v1_is_not_published_before_1_34() -> None:
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(ONE_GPU, "1.33.0", strict=True)


PUBLISHED = {
    ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicy"): ("1.34", "1.35", "1.36", "1.37"),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): ("1.36", "1.37"),
    ("scheduling.k8s.io/v1alpha1", "Workload"): ("1.35",),
    ("scheduling.k8s.io/v1alpha2", "Workload"): ("1.36",),
    ("scheduling.k8s.io/v1alpha2", "PodGroup"): ("1.36",),
    ("scheduling.k8s.io/v1beta1", "Workload"): ("1.37",),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): ("1.34", "1.35", "1.36", "1.37"),
    ("resource.k8s.io/v1", "DeviceClass"): ("1.34", "1.35", "1.36", "1.37"),
}
"""What docs/kubernetes-versions.md says each minor publishes, for the APIs Placer's features depend on."""


@pytest.mark.parametrize("minor", SUPPORTED)
def test_each_minor_publishes_what_the_support_matrix_says(minor: str) -> None:
    """Published = the minor's OpenAPI has a schema for the kind (served when the feature gates its docs name
    are on: alpha APIs are off by default). Any object will do: only a missing schema is a different error."""
    found = set()
    for api_version, kind in PUBLISHED:
        try:
            kubernetes_validate.validate({"apiVersion": api_version, "kind": kind}, f"{minor}.0", strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            continue
        except kubernetes_validate.ValidationError:
            pass
        found.add((api_version, kind))
    assert found == {key for key, minors in PUBLISHED.items() if minor in minors}
