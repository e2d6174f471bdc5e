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
    ["support"],
    ["pods"],
    ["workloads"],
    ["gang"],
    ["actions"],
    ["policy.cel"],
    ["policy.fields"],
    ["policy"],
    ["policy.sources"],
    ["policy.state"],
    ["engine"],
    ["placement"],
    ["admission"],
    ["export"],
    ["cluster.client"],
    ["cluster.reports", "cluster.health", "cluster.podgroups", "cluster.spot"],
    ["cluster"],
    ["change"],
    ["server"],
    ["commands"],
]
"""The layers, bottom first, as the folders name them (docs/architecture.md draws the same picture). A module
belongs to the longest unit that prefixes it; it imports only from its own unit or from a lower layer, so
siblings of one layer (the four parts of `cluster`) never import each other."""


def unit_of(module: str) -> str:
    """The unit of `webhook.a.b.c`: the longest of the LAYERS' names that prefixes `a.b.c`."""
    path = module.removeprefix("webhook.")
    units = [unit for layer in LAYERS for unit in layer if path == unit or path.startswith(unit + ".")]
    assert units, f"{module} is in no layer: add its package to LAYERS"
    return max(units, key=len)


def test_imports_flow_one_way() -> None:
    rank = {unit: index for index, layer in enumerate(LAYERS) for unit in layer}
    wrong = []
    for path in sorted((REPO / "webhook").rglob("*.py")):
        relative = path.relative_to(REPO).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        if module in ("webhook", "webhook.__main__"):
            continue
        here = unit_of(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("webhook."):
                target = unit_of(node.module)
                if target != here and rank[target] >= rank[here]:
                    wrong.append(f"{module} ({here}) imports {node.module} ({target})")
    assert wrong == []


def test_the_root_holds_only_the_package_face() -> None:
    loose = sorted(path.name for path in (REPO / "webhook").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"]


def test_every_package_says_its_job_and_what_it_may_import() -> None:
    silent = []
    for init in sorted((REPO / "webhook").rglob("__init__.py")):
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree) or ""
        if not doc or (init.parent != REPO / "webhook" and "May import" not in doc):
            silent.append(str(init.relative_to(REPO)))
    assert silent == []


def test_modules_and_packages_stay_small() -> None:
    """One job per module (under 400 lines), and no folder of more than 15 modules: a package that grows
    past that gets sub-packages named for their parts."""
    long = [f"{path.relative_to(REPO)}: {len(path.read_text().splitlines())}"
            for path in (REPO / "webhook").rglob("*.py") if len(path.read_text().splitlines()) > 400]
    crowded = [f"{folder.relative_to(REPO)}: {count}" for folder in (REPO / "webhook").rglob("*/")
               if (count := len(list(folder.glob("*.py"))) - 1) > 15]
    assert long == []
    assert crowded == []
