"""What Placer reads of DRA objects exists, with the same shape, in every supported minor: each minor's
published OpenAPI schemas (the `kubernetes-validate` package's copy of Kubernetes' `api/openapi-spec`)
accept, in strict mode, the fields `webhook.dra` reads, and `resource.k8s.io/v1` is new in 1.34 (KEP-4381,
DRA structured parameters, GA in v1.34)."""

from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import FIXTURES
from webhook.dra import CLASS_KIND, TEMPLATE_KIND, class_entry, device_entry

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
