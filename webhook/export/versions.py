"""The Kubernetes version an export is for: which `admissionregistration.k8s.io` version serves
MutatingAdmissionPolicy there, and which CEL environment checks the expressions written to it.

- `v1beta1` is served from 1.34 (with the `MutatingAdmissionPolicy` feature gate), `v1` from 1.36: the
  published OpenAPI schemas of each release (kubernetes-validate's `v1.3x.0-local` folders, which
  `tests/export/test_versions.py` reads) have `mutatingadmissionpolicy-admissionregistration-v1` from 1.36 on
  and not in 1.35.
- An API server compiles expressions it has not stored before against the CEL environment of its
  *compatibility* version (`environment.NewExpressions`, `environment.DefaultCompatibilityVersion()` in
  staging/src/k8s.io/apiserver/pkg/cel/environment/base.go, used by the admissionregistration validation in
  pkg/apis/admissionregistration/validation/validation.go), which is one minor behind the binary
  (`compatVersion := binaryVersion.SubtractMinor(1)`, staging/src/k8s.io/component-base/compatibility/version.go;
  a v1.36.2 server reports `minCompatibilityMinor: 35` in `/version`). So a 1.35 server takes what the 1.34
  environment has.
"""

import re

KubernetesVersion = tuple[int, int]

SUPPORTED: tuple[KubernetesVersion, ...] = ((1, 34), (1, 35), (1, 36), (1, 37))
DEFAULT_TARGET: KubernetesVersion = (1, 37)
API_VERSIONS = ("v1beta1", "v1")
V1_FROM: KubernetesVersion = (1, 36)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?$")


def parse_version(text: str) -> KubernetesVersion:
    """`1.36`, `v1.36` or `1.36.2` as (1, 36); ValueError naming the supported minors otherwise."""
    match = _VERSION.match(text.strip())
    for version in SUPPORTED:
        if match is not None and version == (int(match.group(1)), int(match.group(2))):
            return version
    raise ValueError(f"Kubernetes version {text!r}: the export supports {', '.join(show(v) for v in SUPPORTED)}")


def show(version: KubernetesVersion) -> str:
    return f"{version[0]}.{version[1]}"


def compatibility_version(target: KubernetesVersion) -> KubernetesVersion:
    """The version whose CEL environment a `target` API server checks new expressions against."""
    return (target[0], target[1] - 1)


def api_version_for(target: KubernetesVersion, requested: str | None = None) -> str:
    """`v1` where the target serves it, else `v1beta1`; a request for `v1` on an older target is an error."""
    if requested is None:
        return "v1" if target >= V1_FROM else "v1beta1"
    if requested not in API_VERSIONS:
        raise ValueError(f"--api-version must be one of {', '.join(API_VERSIONS)}")
    if requested == "v1" and target < V1_FROM:
        raise ValueError(f"admissionregistration.k8s.io/v1 MutatingAdmissionPolicy is served from Kubernetes "
                         f"{show(V1_FROM)}; the target is {show(target)}: use --api-version v1beta1")
    return requested
