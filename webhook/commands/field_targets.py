"""What the offline tools (`lint`, `apply`, `test`, `export`) check field paths against, from their flags.

`--kubernetes-version V` checks against the schemas Kubernetes V publishes (default: the newest supported);
`--kube` against the connected cluster's version and its own `/openapi/v3`; `--crd FILE` (repeatable) adds
operator kinds from CustomResourceDefinition manifests, whose schemas are otherwise unknown offline.
"""

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from webhook.cluster.client.api import ApiError, KubeApi, TransportError, api_from_flags
from webhook.cluster.client.connection import ConnectionSetupError
from webhook.commands.flags import add_cluster, add_policies, policies_help
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.fields.cluster_schemas import cluster_field_checks
from webhook.policy.fields.field_check import FieldChecks
from webhook.policy.fields.schemas import KindKey, Schema, crd_kinds
from webhook.policy.fields.versions import DEFAULT, SUPPORTED, cluster_target_version, target_version
from webhook.policy.sources.documents import ManifestError, expand_lists, read_documents
from webhook.support.config import DEFAULT_POLICIES

log = logging.getLogger(__name__)


class FieldTargetError(ValueError):
    """A flag that names no usable target: a version outside the supported range, an unreadable CRD file."""


def add_target_flags(command: argparse.ArgumentParser, *, kube: bool = True) -> None:
    """`--kubernetes-version` and `--crd`, and with `kube` `--kube`, `--kubeconfig` and `--context` (for a
    command that has none of its own, as `apply` has)."""
    command.add_argument(
        "--kubernetes-version", metavar="VERSION",
        help=f"check field paths against this Kubernetes version's schemas ({', '.join(SUPPORTED)}; default "
             f"{DEFAULT}, or the cluster's with --kube)",
    )
    command.add_argument("--crd", action="append", default=None, metavar="FILE",
                         help="CustomResourceDefinition manifest: the schema of an operator kind (repeatable)")
    if kube:
        command.add_argument("--kube", action="store_true", default=False,
                             help="check field paths against the cluster's version and /openapi/v3 (read only)")
        add_cluster(command, when="--kube")


def add_policy_paths(command: argparse.ArgumentParser) -> None:
    """Policy files and directories as arguments or as `--policies PATH` (repeatable), as every verb that
    reads policies takes them (`PLACER_POLICIES` fills `--policies`); both together add up."""
    command.add_argument("paths", nargs="*", metavar="PATH", help=policies_help())
    add_policies(command)


def policy_paths(args: argparse.Namespace) -> list[str]:
    """The paths of `add_policy_paths`: the arguments, then `--policies`, else the default directory."""
    return [*args.paths, *(args.policies or [])] or [str(DEFAULT_POLICIES)]


def compiler_from_flags(args: argparse.Namespace) -> PolicyCompiler | int:
    """The compiler the flags of `add_target_flags` ask for, or the exit status when they cannot be honoured,
    said on stderr: 2 for a flag that names no usable target, 1 for a cluster that cannot be read."""
    api = None
    prog = getattr(args, "prog", None) or f"placer {args.command}"
    try:
        if args.kube:
            api = api_from_flags(args.kubeconfig, args.context)
        return policy_compiler(kubernetes_version=args.kubernetes_version, crd_paths=args.crd or (), api=api)
    except FieldTargetError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    except (ConnectionSetupError, TransportError, ApiError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    finally:
        if api is not None:
            api.close()


def read_crds(paths: Sequence[str]) -> dict[KindKey, Schema]:
    """The kinds of the CustomResourceDefinitions in `paths` (files of YAML or JSON manifests)."""
    kinds: dict[KindKey, Schema] = {}
    for path in paths:
        try:
            documents = list(expand_lists(read_documents(Path(path).read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, ManifestError) as error:
            raise FieldTargetError(f"--crd {path}: {error}") from None
        found = crd_kinds(document.content for document in documents)
        if not found:
            raise FieldTargetError(f"--crd {path}: no CustomResourceDefinition with a schema in it")
        kinds.update(found)
    return kinds


def policy_compiler(*, kubernetes_version: str | None, crd_paths: Sequence[str] = (),
                    api: KubeApi | None = None) -> PolicyCompiler:
    """A compiler whose field checks are those the flags ask for (see `field_checks`)."""
    return PolicyCompiler(fields=field_checks(kubernetes_version=kubernetes_version, crd_paths=crd_paths, api=api))


def field_checks(*, kubernetes_version: str | None, crd_paths: Sequence[str] = (),
                 api: KubeApi | None = None) -> FieldChecks:
    """The checks the flags ask for. A version named on the command line wins over the cluster's (its
    published schemas are used); the cluster's is read when `api` is given and no version is named.
    Raises FieldTargetError, and the API errors of `api`."""
    crds = read_crds(crd_paths)
    if api is not None and kubernetes_version is None:
        return _cluster_checks(api, crds)
    try:
        version = target_version(kubernetes_version)
    except ValueError as error:
        raise FieldTargetError(f"--kubernetes-version: {error}") from None
    return FieldChecks(version, crds=crds)


def _cluster_checks(api: KubeApi, crds: dict[KindKey, Schema]) -> FieldChecks:
    """The cluster's version and schemas. Every API server serves `/version` and `/openapi/v3` to any
    authenticated client (the `system:discovery` ClusterRole, plugin/pkg/auth/authorizer/rbac/bootstrappolicy
    policy.go); where one is refused or missing all the same, the published schemas stand in, said on stderr."""
    try:
        version = cluster_target_version(api.get)
    except ApiError as error:
        if error.code not in (403, 404):
            raise
        log.warning("the cluster's /version cannot be read (%s): field paths are checked against Kubernetes %s",
                    error, DEFAULT)
        return FieldChecks(DEFAULT, crds=crds)
    try:
        return cluster_field_checks(api.get, version=version, crds=crds)
    except ApiError as error:
        if error.code not in (403, 404):
            raise
        log.warning("the cluster's /openapi/v3 cannot be read (%s): field paths are checked against the schemas "
                    "Kubernetes %s publishes", error, version)
        return FieldChecks(version, crds=crds)


def quiet_policy_log() -> None:
    """One-shot commands print every policy error themselves; the source's log lines (written for a server,
    "keeping its last good content") would only repeat them, misleadingly."""
    logging.getLogger("webhook.policy").setLevel(logging.CRITICAL)
