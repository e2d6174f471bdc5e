"""Admissions that fail while granian replaces workers, by kind of failure.

    python -m tests.bench.bench_replacements [--reloads 6] [--connections 4] [--rounds 2]

`placer serve` with 2 workers under a closed-loop client (tests/e2e/closed_loop.py: keep-alive connections,
each sending the next admission when the previous is answered, as the API server's Go client does) while the
main process gets SIGHUP every 13.5 s: granian replaces both workers, one after the other, each new one beside
the old for `RESPAWN_INTERVAL_SECONDS` (6 s). Prints, per round, the admissions answered and those that
failed: while connecting, as the first request on a new connection, or on a kept-alive connection (the
keep-alive race that `webhook/server/respawn_drain.py` removes).
"""

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

from tests.conftest import fixture_request
from tests.e2e.closed_loop import ClosedLoopClient
from tests.e2e.server import running_server
from webhook.commands.certs import issue
from webhook.server.serve import RESPAWN_INTERVAL_SECONDS

RELOAD_EVERY_SECONDS = 2 * RESPAWN_INTERVAL_SECONDS + 1.5
"""Both workers replaced, then a moment with no replacement going on."""


def run(reloads: int, connections: int) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="placer-replacements-") as directory:
        workdir = Path(directory)
        certs = issue(workdir / "certs", ["localhost", "127.0.0.1"])
        with running_server(workdir, certs) as server, ClosedLoopClient(
                server.url, certs.ca_cert, fixture_request("pod-bare-create-dryrun"),
                connections=connections) as client:
            client.wait_for_answers(20)
            for _ in range(reloads):
                os.kill(server.process.pid, signal.SIGHUP)
                time.sleep(RELOAD_EVERY_SECONDS)
            failures = list(client.failures)
            answered = client.answered()
            stopped = server.log_text().count("Stopped old worker")
    return {"answered": answered, "workers stopped": stopped, "failed": len(failures),
            "connecting": sum(f.connecting for f in failures),
            "first on its connection": sum(f.fresh and not f.connecting for f in failures),
            "on a kept-alive connection": sum(not (f.fresh or f.connecting) for f in failures)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reloads", type=int, default=6)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(f"2 workers, {args.connections} keep-alive connections, SIGHUP every {RELOAD_EVERY_SECONDS} s")
    for round_number in range(1, args.rounds + 1):
        row = run(args.reloads, args.connections)
        print(f"round {round_number}, {time.strftime('%H:%M:%S')}: "
              + ", ".join(f"{key} {value}" for key, value in row.items()), flush=True)


if __name__ == "__main__":
    main()
