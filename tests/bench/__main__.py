"""The whole benchmark suite in one command, printing every table:

    python -m tests.bench [--iterations 1000] [--duration 10] [--soak 200000]

1. engine: µs per admission in-process, by rule count and object size, and the engine's phases;
2. direct: Placer's /mutate (2 and 50 rules, the captured Pod review and the 8.5 KB Deployment; 2 rules and
   1,000 sibling Pods of one ReplicaSet) beside a minimal RSGI app on the same server (granian) and TLS (the
   stack's floor), at 1, 8 and 32 connections, with req/s, p50/p99, CPU seconds per 1,000 requests and worker
   RSS (wrk when installed);
3. server: `placer serve` over TLS under keep-alive load from separate processes, /mutate and /healthz at
   1, 8 and 32 connections, and the RSS of each worker;
4. soak (with --soak N): N admissions with worker RSS sampled along the way.

    python -m tests.bench scale [--namespaces 1,1000,10000] [--churn 10] [--duration 30]

runs the scale table instead (tests.bench.bench_scale): cluster state under namespace churn.
"""

import argparse
import sys

from tests.bench import bench_direct, bench_engine, bench_scale, bench_server


def main() -> None:
    if sys.argv[1:2] == ["scale"]:
        bench_scale.main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description="Placer's benchmark suite")
    parser.add_argument("--iterations", type=int, default=1000, help="engine iterations per case")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per server case")
    parser.add_argument("--soak", type=int, default=0, help="admissions for the soak run (0: skip)")
    args = parser.parse_args()
    print("== engine ==", flush=True)
    sys.argv = ["bench_engine", "--iterations", str(args.iterations)]
    bench_engine.main()
    print("\n== direct ==", flush=True)
    sys.argv = ["bench_direct", "--duration", str(args.duration)]
    bench_direct.main()
    print("\n== server ==", flush=True)
    sys.argv = ["bench_server", "--duration", str(args.duration)]
    bench_server.main()
    if args.soak:
        print("\n== soak ==", flush=True)
        sys.argv = ["bench_server", "--soak", str(args.soak)]
        bench_server.main()


if __name__ == "__main__":
    main()
