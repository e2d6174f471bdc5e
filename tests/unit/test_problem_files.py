"""Rule-problem files of exited workers do not pile up in the memory-backed metrics directory, and a live
worker's file, or a recent one, is kept so its last errors reach the policy's health."""

import os
import subprocess
import sys
import time
from pathlib import Path

from webhook.server.metrics_files import PROBLEMS_KEPT_SECONDS, drop_stale_problem_files
from webhook.support.rule_problems import FILE_PREFIX


def _exited_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_only_old_files_of_exited_workers_are_dropped(tmp_path: Path) -> None:
    old = time.time() - PROBLEMS_KEPT_SECONDS - 60
    gone_old = tmp_path / f"{FILE_PREFIX}{_exited_pid()}.json"
    gone_recent = tmp_path / f"{FILE_PREFIX}{_exited_pid()}.json"
    live_old = tmp_path / f"{FILE_PREFIX}{os.getpid()}.json"
    for path in (gone_old, gone_recent, live_old):
        path.write_text("[]")
    os.utime(gone_old, (old, old))
    os.utime(live_old, (old, old))
    assert drop_stale_problem_files(tmp_path) == [gone_old]
    assert not gone_old.exists() and gone_recent.exists() and live_old.exists()
