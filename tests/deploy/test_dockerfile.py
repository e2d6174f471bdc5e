"""The Dockerfile builds what docs/install.md and issue 3 ask for. (No container engine runs here, so its
instructions are read; the install it performs is the one `.ci/run` performs on every run.)"""

import re
import sys

from tests.conftest import REPO
from webhook.commands.cli import _parser


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, argument = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), argument.strip()))
    return stages


def test_multi_stage_with_only_the_virtual_environment_copied_into_the_final_image() -> None:
    stages = _stages()
    assert len(stages) >= 2
    final = stages[-1]
    copies = [argument for instruction, argument in final if instruction == "COPY"]
    assert copies == ["--from=build /opt/placer /opt/placer"]
    runs = " ".join(argument for instruction, argument in final if instruction == "RUN")
    assert not re.search(r"apt-get install|gcc|build-essential|pip install", runs)


def test_runs_as_a_numeric_non_root_user_serving_8443_with_placer_serve() -> None:
    final = dict(_stages()[-1])
    user = final["USER"].split(":")
    assert all(part.isdigit() and int(part) > 0 for part in user)
    assert final["EXPOSE"] == "8443"
    assert final["ENTRYPOINT"] == '["placer", "serve"]'
    environment = dict(re.findall(r"(PLACER_[A-Z_]+)=(\S+)", final["ENV"]))
    assert environment["PLACER_BIND"] == "0.0.0.0:8443"
    assert environment["PLACER_TLS_CERT"].startswith("/etc/placer/tls/")
    # Every PLACER_ variable the image sets is a real `placer serve` flag.
    flags = {max(a.option_strings, key=len) for a in _parser()._subparsers._group_actions[0].choices["serve"]._actions
             if a.option_strings}
    for name in environment:
        assert "--" + name.removeprefix("PLACER_").lower().replace("_", "-") in flags


def test_the_image_runs_the_python_ci_tests_and_installs_from_the_one_lock() -> None:
    """The image's Python is the one the tests run on, and its install is pinned by the lock CI uses."""
    stages = _stages()
    bases = [dict(stage)["FROM"].split()[0] for stage in stages]
    assert all(base.startswith(f"python:{sys.version_info.major}.{sys.version_info.minor}-") for base in bases)
    build_runs = " ".join(argument for instruction, argument in stages[0] if instruction == "RUN")
    assert "-c constraints.txt" in build_runs
    assert "-c constraints.txt" in (REPO / ".ci" / "run").read_text()
    lock = (REPO / "constraints.txt").read_text()
    assert re.search(r"^granian==", lock, re.M) and not re.search(r"^gunicorn", lock, re.M)
    assert re.search(r"^kubernetes==37\.", lock, re.M)
