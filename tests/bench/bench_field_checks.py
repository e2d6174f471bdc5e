"""What the field checks add to loading policies (`placer lint`, a server's reload).

    .venv/bin/python -m tests.bench.bench_field_checks [PATH...] [--runs 20]

Loads the policies (default `policies/`) with a compiler whose field checks are off, then on, each in the
same process: the first load (for the checks, reading the target version's published schemas) and the
median of `--runs` loads after it (the checks alone).
"""

import argparse
import statistics
import time

from webhook.admission.offline import load_policies
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.fields.field_check import FieldChecks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["policies"])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    for enabled in (False, True):
        compiler = PolicyCompiler(fields=FieldChecks(enabled=enabled))
        started = time.perf_counter()
        snapshot = load_policies(args.paths, required=True, compiler=compiler)
        first = time.perf_counter() - started
        runs = []
        for _ in range(args.runs):
            started = time.perf_counter()
            load_policies(args.paths, required=True, compiler=compiler)
            runs.append(time.perf_counter() - started)
        expressions = sum(len(policy.programs()) for policy in snapshot.policies)
        print(f"field checks {'on ' if enabled else 'off'}: {len(snapshot.policies)} policies, {expressions} "
              f"expressions: first load {first * 1000:.0f} ms, then {statistics.median(runs) * 1000:.1f} ms "
              f"(median of {args.runs})")


if __name__ == "__main__":
    main()
