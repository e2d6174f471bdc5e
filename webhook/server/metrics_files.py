"""The metrics files of processes that have exited, folded into one file per type and deleted.

Every worker writes its samples to files of its own in PROMETHEUS_MULTIPROC_DIR (`counter_<pid>.db`,
`histogram_<pid>.db`, ...), and `/metrics` adds up every file there. A worker replaced after its CEL leak
budget, its lifetime or its memory limit, or killed, leaves its files behind: their counts must stay in the
totals (a counter that drops looks like a restart to Prometheus), but the directory is on the pod's
memory-backed /tmp (64 Mi), so a file per dead worker cannot pile up. The main process folds them: the
values of every dead process's counter, histogram and summary files are added into `<type>_folded.db`
(prometheus_client's own file format, under a name it reads as that type), and its live gauges are dropped
(they describe a process that is gone). Scrapes hold the directory's lock shared while they read
(`metrics.directory_lock`), so none sees a count twice or not at all.
"""

import logging
import os
import time
from collections import defaultdict
from pathlib import Path

from prometheus_client.mmap_dict import MmapedDict

from webhook.support.metrics import directory_lock
from webhook.support.rule_problems import FILE_PREFIX as PROBLEMS_PREFIX

PROBLEMS_KEPT_SECONDS = 3600.0
"""How long the rule-problem file of an exited worker is kept: well past the 15-minute health window."""

log = logging.getLogger(__name__)

FOLDED = "folded"
"""The name part of the files holding the dead processes' totals: `counter_folded.db`."""


def fold_dead_processes(directory: Path, alive: set[int] | None = None) -> list[int]:
    """Fold the files of processes not running (or not in `alive`, when given); the pids folded."""
    dead: dict[int, list[Path]] = defaultdict(list)
    for path in directory.glob("*.db"):
        pid = _pid_of(path)
        if pid is not None and not (pid in alive if alive is not None else _running(pid)):
            dead[pid].append(path)
    if not dead:
        return []
    with directory_lock(str(directory), exclusive=True):
        by_type: dict[str, list[Path]] = defaultdict(list)
        for paths in dead.values():
            for path in paths:
                kind = path.name.split("_", 1)[0]
                if kind == "gauge":
                    path.unlink(missing_ok=True)
                else:
                    by_type[kind].append(path)
        for kind, paths in by_type.items():
            _fold(directory / f"{kind}_{FOLDED}.db", paths)
    log.info("metrics of exited processes %s folded into the totals", sorted(dead))
    return sorted(dead)


def drop_stale_problem_files(directory: Path, older_than: float = PROBLEMS_KEPT_SECONDS) -> list[Path]:
    """Delete the rule-problem files (`rule_problems_<pid>.json`) of exited workers once they are older than
    the health window: their last errors have been published by then, and a file per replaced worker must not
    fill the 64 Mi directory."""
    dropped = []
    now = time.time()
    for path in directory.glob(f"{PROBLEMS_PREFIX}*.json"):
        pid = _pid_of(path)
        try:
            stale = pid is not None and not _running(pid) and now - path.stat().st_mtime > older_than
        except OSError:
            continue
        if stale:
            path.unlink(missing_ok=True)
            dropped.append(path)
    return dropped


def _fold(target: Path, paths: list[Path]) -> None:
    """Add the samples of `paths` into `target` (created if missing), then delete `paths`."""
    totals: dict[str, float] = defaultdict(float)
    for path in ([target] if target.exists() else []) + paths:
        for key, value, _timestamp, _position in MmapedDict.read_all_values_from_file(str(path)):  # type: ignore[no-untyped-call]
            totals[key] += value
    staging = target.with_suffix(".folding")
    staging.unlink(missing_ok=True)
    folded = MmapedDict(str(staging))  # type: ignore[no-untyped-call]
    try:
        for key, value in totals.items():
            folded.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]
    finally:
        folded.close()  # type: ignore[no-untyped-call]
    os.replace(staging, target)
    for path in paths:
        path.unlink(missing_ok=True)


def _pid_of(path: Path) -> int | None:
    """The process a file belongs to (its name's last part), None for the folded totals."""
    last = path.stem.rsplit("_", 1)[-1]
    return int(last) if last.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
