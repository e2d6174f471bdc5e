"""The `cluster` tier: Placer installed as users install it, against the cluster named by PLACER_E2E_KUBECONFIG.

Skipped (with that reason) when the variable is unset. How Placer is reached (started here and registered by
URL, or deployed: PLACER_E2E_IN_CLUSTER=1) and what is created is in tests/cluster/harness.py.
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster, NoRouteBack, placer_on_cluster
from tests.conftest import KUBECONFIG_ENV


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(KUBECONFIG_ENV):
        return
    skip = pytest.mark.skip(reason=f"{KUBECONFIG_ENV} is not set: no cluster to run the cluster tier against")
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        with placer_on_cluster(Path(os.environ[KUBECONFIG_ENV]), tmp_path_factory.mktemp("placer")) as state:
            yield state
    except NoRouteBack as problem:
        pytest.fail(str(problem))
