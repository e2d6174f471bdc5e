"""Multiprocess metrics stay right across fork now that the process id is not asked of the kernel per sample.

prometheus_client picks its multiprocess mode when it is imported, so each case runs in a fresh interpreter
with PROMETHEUS_MULTIPROC_DIR set, the way `placer serve` starts its workers.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FORKING_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from webhook.support.metrics import Metrics
    from prometheus_client import values
    metrics = Metrics()
    rules = [("p", "r1", "applied"), ("p", "r2", "not-matched")]
    metrics.observe_admission("Pod", "CREATE", "patched", 0.001, rules)
    metrics.observe_unplaceable("Pod", 1)
    child = os.fork()
    if child == 0:
        metrics.observe_admission("Pod", "CREATE", "patched", 0.001, rules)
        metrics.observe_admission("Pod", "CREATE", "patched", 0.001, rules)
        metrics.observe_unplaceable("Pod", 2)
        os._exit(0)
    os.waitpid(child, 0)
    metrics.observe_admission("Pod", "CREATE", "patched", 0.001, rules[:1])
    text = metrics.render()[0].decode()
    print(json.dumps({
        "parent": os.getpid(), "child": child, "swapped": getattr(values.ValueClass, "placer_process_id", False),
        "files": sorted(os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"])),
        "lines": [line for line in text.splitlines() if line.startswith("placer_")],
    }))
""")


def run(script: str, directory: Path) -> dict[str, object]:
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_forked_process_writes_its_own_samples_and_the_scrape_adds_them(tmp_path: Path) -> None:
    seen = run(FORKING_SCRIPT, tmp_path)
    assert seen["swapped"] is True
    parent, child = seen["parent"], seen["child"]
    files = seen["files"]
    assert isinstance(files, list)
    for pid in (parent, child):  # prometheus_client's samples, and each family Placer writes itself
        assert {f"counter_{pid}.db", f"counter_placer_admission_requests_{pid}.db",
                f"counter_placer_rule_evaluations_{pid}.db",
                f"histogram_placer_admission_duration_seconds_{pid}.db"} <= set(files)
    lines = seen["lines"]
    assert isinstance(lines, list)
    assert 'placer_rule_evaluations_total{outcome="applied",policy="p",rule="r1"} 4.0' in lines
    assert 'placer_rule_evaluations_total{outcome="not-matched",policy="p",rule="r2"} 3.0' in lines
    assert 'placer_admission_requests_total{kind="Pod",operation="CREATE",result="patched"} 4.0' in lines
    assert "placer_admission_duration_seconds_count 4.0" in lines
    assert 'placer_unplaceable_templates_total{kind="Pod"} 3.0' in lines


def test_a_process_that_already_wrote_samples_keeps_its_value_class(tmp_path: Path) -> None:
    """Two value classes in one process would keep two maps of one file and overwrite each other's entries."""
    script = textwrap.dedent("""
        import json, os
        from prometheus_client import Counter, values
        Counter("early", "written before Placer's metrics exist").inc()
        from webhook.support.metrics import Metrics
        metrics = Metrics()
        metrics.observe_admission("Pod", "CREATE", "patched", 0.001, [("p", "r1", "applied")])
        text = metrics.render()[0].decode()
        print(json.dumps({"swapped": getattr(values.ValueClass, "placer_process_id", False),
                          "lines": [line for line in text.splitlines() if not line.startswith("#")]}))
    """)
    seen = run(script, tmp_path)
    assert seen["swapped"] is False
    lines = seen["lines"]
    assert isinstance(lines, list)
    assert "early_total 1.0" in lines
    assert 'placer_rule_evaluations_total{outcome="applied",policy="p",rule="r1"} 1.0' in lines


FOLDING_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from webhook.support.metrics import Metrics
    from webhook.server.metrics_files import fold_dead_processes
    directory = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    metrics = Metrics()
    rules = [("p", "r1", "applied")]
    metrics.observe_policies(3, 0)
    children = []
    for generation in range(3):  # three workers, one after the other, each exits
        child = os.fork()
        if child == 0:
            for _ in range(generation + 1):
                metrics.observe_admission("Pod", "CREATE", "patched", 0.001, rules)
            metrics.observe_policies(3, 0)
            os._exit(0)
        os.waitpid(child, 0)
        children.append(child)
        before = metrics.render()[0].decode()
        folded = fold_dead_processes(directory)
        after = metrics.render()[0].decode()
        assert folded == [child], (folded, child)
        assert sorted(l for l in before.splitlines() if not l.startswith(("#", "placer_policies"))) == sorted(
            l for l in after.splitlines() if not l.startswith(("#", "placer_policies"))), (before, after)
    print(json.dumps({"files": sorted(os.listdir(directory)), "children": children, "parent": os.getpid(),
                      "lines": [l for l in metrics.render()[0].decode().splitlines() if l.startswith("placer_")]}))
""")


def test_the_files_of_exited_workers_are_folded_into_the_totals_and_deleted(tmp_path: Path) -> None:
    """Workers come and go (recycled, killed); their counts stay in the totals and their files do not pile up
    on the pod's 64 Mi memory-backed /tmp: each is folded into one file per type by the main process."""
    seen = run(FOLDING_SCRIPT, tmp_path)
    files = seen["files"]
    assert isinstance(files, list) and isinstance(seen["children"], list)
    assert not [name for name in files if any(str(child) in name for child in seen["children"])], files
    assert {"counter_folded.db", "histogram_folded.db"} <= set(files), files
    lines = seen["lines"]
    assert isinstance(lines, list)
    assert 'placer_admission_requests_total{kind="Pod",operation="CREATE",result="patched"} 6.0' in lines
    assert 'placer_rule_evaluations_total{outcome="applied",policy="p",rule="r1"} 6.0' in lines
    assert "placer_admission_duration_seconds_count 6.0" in lines
    assert 'placer_policies{state="ready"} 3.0' in lines  # the living process's gauge; the dead ones' are gone
