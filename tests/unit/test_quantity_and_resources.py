"""Kubernetes quantities and the effective resources the scheduler counts."""

import pytest

from webhook.pods.quantity import InvalidQuantityError, parse_quantity
from webhook.pods.resources import effective_resources


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("2", 2.0), ("1Gi", 2**30), ("1e3", 1000.0), ("1.5", 1.5), ("100M", 1e8), ("64Ki", 65536.0),
     ("1E3", 1000.0), ("250u", 0.00025), (".5", 0.5), (3, 3.0), (0.5, 0.5), ("12n", 12e-9), ("+1k", 1000.0),
     ("007", 7.0), ("16", 16.0)],
)
def test_quantities(text: object, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["1.5.5", "abc", "", "1Gb", "1e400", "1 Gi", "--1", True, None, [1], "1e", "Mi",
                                  "\u0663", "\uff19", "9" * 400])  # Arabic-Indic three, fullwidth nine
def test_invalid_quantities(text: object) -> None:
    with pytest.raises(InvalidQuantityError):
        parse_quantity(text)


def test_effective_resources_follow_the_scheduler() -> None:
    spec = {
        "initContainers": [
            {"name": "setup", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        ],
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "2", "memory": "2Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    resources, notes = effective_resources(spec)
    assert notes == []
    # cpu: max(app 1.25 + sidecar 0.5, init 3) + overhead 0.1
    assert resources["requests"]["cpu"] == pytest.approx(3.1)
    # memory: requests default to limits (2Gi) + 512Mi, vs init 1Gi
    assert resources["requests"]["memory"] == 2 * 2**30 + 512 * 2**20
    assert resources["requests"]["nvidia.com/gpu"] == 2
    assert resources["limits"] == {"nvidia.com/gpu": 2.0, "memory": 2.0 * 2**30}


def test_invalid_quantity_is_left_out_with_a_note() -> None:
    resources, notes = effective_resources({"containers": [{"name": "c", "resources": {"limits": {"cpu": "1.5.5"}}}]})
    assert resources["limits"] == {}
    assert notes and "cpu" in notes[0]


def test_containers_repeating_a_quantity_each_count_and_each_bad_one_is_named() -> None:
    """Sidecars copied from one template share their quantity strings (each string is parsed once a pod)."""
    sidecar = {"resources": {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "500m"}}}
    containers = [{"name": f"side-{index}", **sidecar} for index in range(3)]
    containers += [{"name": f"bad-{index}", "resources": {"requests": {"cpu": "half", "memory": 1024}}}
                   for index in range(2)]
    resources, notes = effective_resources({"containers": containers})
    assert resources["requests"] == {"cpu": 1.5, "memory": 3 * 64 * 2**20 + 2 * 1024}
    assert resources["limits"] == {"cpu": 1.5}
    assert [note.split(":")[0] for note in notes] == ["container bad-0", "container bad-1"]


def test_malformed_specs_do_not_raise() -> None:
    for spec in ({"containers": "x"}, {"containers": [1, None]}, {"containers": [{"resources": []}]},
                 {"initContainers": {"a": 1}}, {"overhead": 5}):
        effective_resources(spec)
