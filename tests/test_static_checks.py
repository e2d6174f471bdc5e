"""`ruff` and `mypy --strict` stay clean on webhook/ (configured in pyproject.toml)."""

import ast
import subprocess
import sys

from tests.conftest import REPO


def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "webhook", "tests"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


LAYERS = [
    {"typing", "names", "quantity", "selectors", "resources", "patches", "config", "logs", "metrics", "certs",
     "json_bytes", "json_copy", "node_fit", "volumes", "dra", "counter_file", "rule_problems",
     "review", "__init__", "capacity_share", "share_counts"},
    {"workloads"}, {"gang"}, {"actions"}, {"policy"}, {"engine"}, {"gang_capacity"}, {"pool_fit"},
    {"feasibility", "claims"},
    {"pipeline", "offline", "validation", "suites", "export", "compliance"},
    {"kube"}, {"server", "dev", "drift"}, {"cli", "__main__", "field_targets"},
]
"""Imports flow one way: a module imports only from its own layer or the layers before it."""


def test_imports_flow_one_way() -> None:
    rank = {name: index for index, layer in enumerate(LAYERS) for name in layer}
    wrong = []
    for path in sorted((REPO / "webhook").rglob("*.py")):
        here = rank[path.relative_to(REPO / "webhook").parts[0].removesuffix(".py")]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("webhook."):
                target = node.module.split(".")[1]
                if rank[target] > here:
                    wrong.append(f"{path.relative_to(REPO)} imports {node.module}")
    assert wrong == []
