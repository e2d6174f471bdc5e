"""Shared test fixtures: the real API server captures in tests/fixtures, and certificates."""

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from webhook.commands.certs import issue

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("PLACER_FIXTURES", REPO / "tests" / "fixtures"))
KUBECONFIG_ENV = "PLACER_E2E_KUBECONFIG"
"""The living cluster the `cluster` tier (tests/cluster) and bench_apiserver run against."""


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With a cluster named (PLACER_E2E_KUBECONFIG), the run is one process, whatever `-n` says: the cluster
    tier registers one webhook configuration and serves it from one port on this machine, and its tests
    label and cordon the cluster's nodes and create cluster-scoped policies, so two processes would take each
    other's webhook and nodes (docs/cluster-tier.md). Runs before pytest-xdist reads `-n`."""
    if os.environ.get(KUBECONFIG_ENV) and config.getoption("numprocesses", None):
        config.option.numprocesses = 0


def pytest_report_header(config: pytest.Config) -> str | None:
    if os.environ.get(KUBECONFIG_ENV):
        return f"cluster tier: {KUBECONFIG_ENV} is set, so the run is one process (-n 0)"
    return None


def fixture_request(name: str, directory: str = "requests") -> dict[str, Any]:
    """A captured AdmissionReview body (deep copy, safe to modify)."""
    data = json.loads((FIXTURES / directory / f"{name}.json").read_text())
    return copy.deepcopy(data["body"])


def all_fixture_requests() -> list[Path]:
    return sorted((FIXTURES / "requests").glob("*.json")) + sorted(
        (FIXTURES / "requests-with-serviceaccount").glob("*.json")
    )


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"API server fixtures not found at {FIXTURES} (set PLACER_FIXTURES)")
    return FIXTURES


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A CA and a localhost serving certificate, made once per module: key generation is slow."""
    return issue(tmp_path_factory.mktemp("certs"), ["localhost", "127.0.0.1"], common_name="localhost")
