"""One worker's request path in process: the CPU of a review from body to log line, and where it goes.

    python -m tests.bench.bench_review_path [--rules 2] [--requests 20000] [--profile] [--siblings | --distinct]

The application is built as a `placer serve` worker builds it (`server.app.create_app`, metrics in a
multiprocess directory as under `placer serve`, every sample written to its file as a worker writes it: the
command runs itself again with PROMETHEUS_MULTIPROC_DIR set, which prometheus_client reads when imported;
the admission log line written as JSON to /dev/null) and
called as granian calls it (`await app(scope, protocol)`, the body already read), in one event loop: what
remains is the Python a worker spends per review, without TLS, HTTP or granian's hand-off (the floor of
tests/bench/bench_direct pays those alike). The review is the captured bare Pod of bench_direct, decided
every time (a Pod no controller owns has no siblings); `--siblings` sends Pods of one ReplicaSet (a request
uid and a managedFields time of their own each), so that the Pods after the first are answered from the
sibling cache (`webhook.admission.sibling_cache`). The same bare Pod every time agrees with the one before on
every field the rules observe, so its conditions' outcomes are found kept (`webhook.policy.observed_memo`);
`--distinct` gives each Pod a CPU limit of its own, which the 2-rule policy observes (`resources.limits`): nothing
is found, and after its trial the memo stops making keys, as it does for Pods that all differ.

Printed: µs of thread CPU per review (median of 5 batches), and with `--profile` cProfile's top functions
by own time and by cumulative time, as a share of the whole.
"""

import argparse
import asyncio
import cProfile
import io
import logging
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import values

from tests.bench.bench_direct import NAMESPACE_WITH_POOL, TWO_RULES, distinct_pods
from tests.bench.bench_engine import policies
from tests.bench.siblings import replicaset_pods
from tests.conftest import fixture_request
from webhook.support.metrics import MULTIPROC_ENV


class Scope:
    proto = "http"
    method = "POST"
    path = "/mutate"
    query_string = "timeout=10s"

    def __init__(self, length: int) -> None:
        self.headers = {"content-type": "application/json", "content-length": str(length)}


class Protocol:
    """granian's RSGI protocol for one request whose body is already here."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.status = 0
        self.answer = b""

    async def __call__(self) -> bytes:
        return self.body

    def __aiter__(self) -> Any:
        raise NotImplementedError

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status, self.answer = status, body


@contextmanager
def worker_app(rules: int) -> Iterator[Any]:
    """The application a worker serving `rules` rules builds, in a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="placer-path-") as tmp:
        directory = Path(tmp)
        (directory / "metrics").mkdir()
        policy_dir = directory / "policies"
        policy_dir.mkdir()
        for index, text in enumerate([TWO_RULES] if rules == 2 else policies(rules)):
            (policy_dir / f"policy-{index}.yaml").write_text(text)
        (policy_dir / "namespaces.yaml").write_text(NAMESPACE_WITH_POOL)
        given = os.environ.get(MULTIPROC_ENV)  # main() re-runs itself with one: the samples go to files then
        os.environ[MULTIPROC_ENV] = given or str(directory / "metrics")
        from webhook.server.worker_app import build_worker_app  # noqa: PLC0415
        from webhook.support.config import Settings  # noqa: PLC0415

        settings = Settings(policies=(str(policy_dir),), log_level="info")
        with open(os.devnull, "w") as devnull:
            app = build_worker_app(settings)
            for handler in logging.getLogger().handlers:
                handler.setStream(devnull)  # type: ignore[attr-defined]
            try:
                yield app
            finally:
                logging.getLogger().handlers[:] = []
                if given is None:
                    os.environ.pop(MULTIPROC_ENV, None)


def bodies(count: int, *, siblings: bool, start: int = 0, distinct: bool = False) -> list[bytes]:
    """`count` review bodies: the captured Pod review each time (a bare Pod, never a sibling), or Pods of one
    ReplicaSet (tests.bench.siblings); `distinct`: the captured Pod with a CPU limit of its own each time
    (`bench_direct.distinct_pods`), so that no outcome is kept for what its rules observe."""
    if siblings:
        return replicaset_pods(count, start=start)
    if distinct:
        return distinct_pods(count, start)
    return [orjson.dumps(fixture_request("pod-bare-create-dryrun"))] * count


def serve_all(app: Any, loop: asyncio.AbstractEventLoop, batch: list[bytes]) -> float:
    """Thread CPU seconds to answer every body of `batch` (each checked to be a 200)."""

    async def answer_all() -> None:
        for body in batch:
            protocol = Protocol(body)
            await app(Scope(len(body)), protocol)
            if protocol.status != 200:
                raise SystemExit(f"answered {protocol.status}: {protocol.answer[:200]!r}")

    started = time.thread_time()
    loop.run_until_complete(answer_all())
    return time.thread_time() - started


def measure(rules: int, requests: int, *, siblings: bool, profile: bool, distinct: bool = False) -> dict[str, Any]:
    with worker_app(rules) as app:
        loop = asyncio.new_event_loop()
        try:
            serve_all(app, loop, bodies(min(requests, 2000), siblings=siblings, distinct=distinct))  # warm-up
            size = max(requests // 5, 1)
            batches = [bodies(size, siblings=siblings, start=(1 + index) * size, distinct=distinct)
                       for index in range(5)]
            per_review = [serve_all(app, loop, batch) / len(batch) * 1e6 for batch in batches]
            report = ""
            if profile:
                profiler = cProfile.Profile()
                profiler.enable()
                serve_all(app, loop, bodies(requests, siblings=siblings, start=10 * requests, distinct=distinct))
                profiler.disable()
                report = profile_report(profiler)
        finally:
            loop.close()
    return {"rules": rules, "siblings": siblings, "us": statistics.median(per_review),
            "range": (min(per_review), max(per_review)), "profile": report}


def profile_report(profiler: cProfile.Profile, top: int = 25) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main() -> None:
    if not getattr(values.ValueClass, "_multiprocess", False):
        # prometheus_client chose in-memory samples when it was imported (no PROMETHEUS_MULTIPROC_DIR then); a
        # worker writes every sample to a file: run again as one does.
        with tempfile.TemporaryDirectory(prefix="placer-path-metrics-") as directory:
            command = [sys.executable, "-m", "tests.bench.bench_review_path", *sys.argv[1:]]
            raise SystemExit(subprocess.run(command, env={**os.environ, MULTIPROC_ENV: directory},
                                            check=False).returncode)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", type=int, default=2, help="2 (bench_direct's 2-rule policy) or a multiple of 10")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--siblings", action="store_true", help="Pods of one ReplicaSet rather than one Pod review")
    parser.add_argument("--distinct", action="store_true",
                        help="the bare Pod with a CPU limit of its own each time (no outcome kept for it)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    row = measure(args.rules, args.requests, siblings=args.siblings, profile=args.profile, distinct=args.distinct)
    low, high = row["range"]
    what = ("ReplicaSet sibling Pods" if args.siblings else
            "the captured bare Pod, a CPU limit of its own each" if args.distinct else "the captured bare Pod review")
    print(f"{args.rules} rules, {what}: {row['us']:.1f} µs of CPU per review (batches {low:.1f}-{high:.1f}), "
          f"Python {sys.version.split()[0]}")
    if row["profile"]:
        print(row["profile"])


if __name__ == "__main__":
    main()
