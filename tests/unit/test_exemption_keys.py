"""Exemption seals without an extra step (issue 60): the key's file format with previous keys, seals that keep
verifying after a rotation, the worker's view of the key file, and the warning where no seal can be made."""

import os
import time
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.helpers import review_for, snapshot_of
from tests.unit.test_enforced_escapes import (
    ADMIN,
    EXISTS,
    POLICY,
    RS_CONTROLLER,
    TEAM_A,
    pod_of,
    replicaset_of,
    workload,
)
from webhook.admission.review import WARNING_PREFIX, parse_review
from webhook.admission.seal_keys import SealKeys
from webhook.engine.exemption_seal import (
    SEAL_ANNOTATION,
    ExemptionKeyError,
    ExemptionKeys,
    Seals,
    no_key_warning,
    parse_keys,
    read_keys,
    seal,
    sealed,
)
from webhook.engine.mutate import mutate
from webhook.workloads import default_workload_table

OLD = b"o" * 64
NEW = b"n" * 64


def engine(obj: dict[str, Any], user: dict[str, Any], seals: Seals | None) -> Any:
    body = review_for(obj)
    body["request"]["userInfo"] = user
    return mutate(parse_review(body), snapshot_of(POLICY, namespaces=[TEAM_A]), default_workload_table(), seals=seals)


def exempt_deployment() -> dict[str, Any]:
    return workload("Deployment", {"nodeSelector": {"node-pool": "shared-premium"}, "tolerations": [EXISTS]})


def test_a_key_file_holds_the_key_that_seals_then_the_previous_ones() -> None:
    keys = parse_keys(NEW + b"\n" + OLD + b"\n\n", "f")
    assert keys == ExemptionKeys(NEW, (OLD,))
    assert parse_keys(keys.text().encode(), "f") == keys, "what the controller writes, a worker reads back"
    assert parse_keys(b"  " + NEW + b"  \n", "f") == ExemptionKeys(NEW), "openssl rand -hex 32's output"
    with pytest.raises(ExemptionKeyError, match="f: previous key 1: 5 bytes; an exemption key needs at least 32"):
        parse_keys(NEW + b"\nshort", "f")
    with pytest.raises(ExemptionKeyError, match="f: empty"):
        parse_keys(b"\n \n", "f")


def test_after_a_rotation_old_seals_verify_and_only_the_new_key_seals() -> None:
    template = exempt_deployment()["spec"]["template"]
    template["metadata"]["annotations"] = {SEAL_ANNOTATION: seal(OLD, "team-a", template)}
    rotated = Seals(NEW, previous=(OLD,))
    assert rotated.verifies("team-a", template), "sealed before the rotation: its workload keeps its pods"
    assert not Seals(NEW).verifies("team-a", template), "a key dropped from previous no longer verifies"
    assert not sealed(NEW, "team-b", template, previous=(OLD,)), "the namespace is sealed too"
    mutation = engine(exempt_deployment(), ADMIN, rotated)
    stored = jsonpatch.apply_patch(exempt_deployment(), mutation.patch)
    assert stored["spec"]["template"]["metadata"]["annotations"][SEAL_ANNOTATION] == \
        seal(NEW, "team-a", exempt_deployment()["spec"]["template"])


def test_the_pods_of_a_deployment_sealed_by_the_previous_key_are_admitted_after_a_rotation() -> None:
    deployment = exempt_deployment()
    stored = jsonpatch.apply_patch(deployment, engine(deployment, ADMIN, Seals(OLD)).patch)
    replicaset = replicaset_of(stored)

    def lookup(namespace: str, reference: Any, _deadline: float | None) -> dict[str, Any] | None:
        return replicaset if reference["uid"] == "rs-uid" else None

    pod = pod_of(replicaset)
    assert engine(pod, RS_CONTROLLER, Seals(NEW, lookup)).denial is not None, "without the previous key: refused"
    admitted = engine(pod, RS_CONTROLLER, Seals(NEW, lookup, (OLD,)))
    assert admitted.denial is None and any("exempt" in note for note in admitted.notes)


def test_an_exempt_users_workload_without_a_key_is_admitted_with_a_warning_naming_the_consequence() -> None:
    mutation = engine(exempt_deployment(), ADMIN, None)
    assert mutation.denial is None
    assert mutation.patch == [] or all(SEAL_ANNOTATION not in str(op) for op in mutation.patch)
    warning = "exempt, but its pods will be refused: exemptions need Placer's key (--exemption-key or --kube)"
    assert warning in mutation.warnings
    assert len(WARNING_PREFIX + warning) <= 120
    with_key = engine(exempt_deployment(), ADMIN, Seals(NEW))
    assert not [w for w in with_key.warnings if "exemptions need" in w], "with a key it is sealed, nothing to say"
    compliant = workload("Deployment", {"nodeSelector": {"node-pool": "general"}})
    assert not [w for w in engine(compliant, ADMIN, None).warnings if "exemptions need" in w], \
        "nothing an Enforced policy would refuse: its pods are admitted anyway"


def test_the_no_key_warning_stays_under_120_characters_with_any_template_name() -> None:
    for name in ("", "worker", "w" * 63):
        assert len(WARNING_PREFIX + no_key_warning(name)) <= 120, name
    assert no_key_warning("worker") == ("template worker: exempt, but its pods will be refused: exemptions need "
                                        "Placer's key (--exemption-key or --kube)")


def test_a_worker_follows_the_key_file_and_never_seals_with_another_key(tmp_path: Path) -> None:
    path = tmp_path / "exemption.key"
    now = [0.0]
    keys = SealKeys(path, interval=1.0, monotonic=lambda: now[0])
    assert keys.current() is None, "no file yet: no seals (the controller has not read the Secret)"
    path.write_text(OLD.decode() + "\n")
    assert keys.current() is None, "looked at most once a second"
    now[0] = 1.0
    assert keys.current() == Seals(OLD)
    path.write_text(f"{NEW.decode()}\n{OLD.decode()}\n")
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    now[0] = 2.0
    assert keys.current() == Seals(NEW, previous=(OLD,)), "a rotation reaches the worker within a second"
    path.write_text("short\n")
    os.utime(path, ns=(time.time_ns() + 2 * 10**9, time.time_ns() + 2 * 10**9))
    now[0] = 3.0
    assert keys.current() is None, "an unusable key turns seals off; the old key is not kept"
    path.unlink()
    now[0] = 4.0
    assert keys.current() is None


def test_read_keys_names_the_file_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(ExemptionKeyError, match=r"missing\.key: No such file or directory"):
        read_keys(tmp_path / "missing.key")


def test_placer_apply_as_an_exempt_group_without_a_key_says_the_pods_will_be_refused(capsys: Any) -> None:
    from webhook.commands.cli import main  # noqa: PLC0415
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples" / "enforced-policies" / "escapes"
    policies = Path(__file__).resolve().parents[2] / "policies" / "enforced-team-pool.yaml"
    code = main(["apply", "--policies", str(policies), "--namespace-labels", "tenant=team-a", "--as", "alice",
                 "--as-group", "platform-admins", "-f", str(examples / "platform-agent.yaml"), "-o", "patch"])
    assert code == 0
    assert ("placer: exempt, but its pods will be refused: exemptions need Placer's key (--exemption-key or --kube)"
            in capsys.readouterr().err)
