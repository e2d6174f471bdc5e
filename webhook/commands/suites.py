"""`placer test`: policy test suites as code, run offline, like `kyverno test`.

A suite is a YAML file named `*-test.yaml`:

    apiVersion: placer.dev/v1alpha1
    kind: PolicyTest
    metadata: {name: dedicated-team-pool}
    policies: [../dedicated-team-pool.yaml]        # files or directories, relative to the suite
    resources: [resources/data-team.yaml]          # manifests to admit; Namespace objects among them
                                                   # give namespaceObject its labels
    results:
    - resource: Job/data/batch-train               # Kind/namespace/name (Kind/name: namespace default)
      expected: {spec: {template: {spec: {nodeSelector: {dedicated: data-eng}}}}}   # a subset, inline
      patchedResource: expected/batch-train.yaml   # or the whole object after mutation, from a file
      subset: true                                 # patchedResource compared as a subset
      applied: [dedicated-team-pool/select-dedicated-nodes]
      warnings: ["a substring of a warning"]
    - resource: Deployment/web/frontend
      mutated: false

Each result is one test case; it fails with a diff of what was expected against what Placer produced, and
whenever a rule errors on its resource (an error is a policy that does not work, whatever `failurePolicy`
lets through). A rule that errors on a resource no result names is a failing case of its own.
Subset comparison: every key a map names must be there with a matching value; lists must have the same
length, element by element (a subset of each element).
"""

import argparse
import difflib
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import yaml

from webhook.admission.offline import DEFAULT_NAMESPACE, ApplyReport, ManifestResult, apply_manifests, rule_errors
from webhook.commands.field_targets import add_target_flags, compiler_from_flags, quiet_policy_log
from webhook.commands.flags import add_output
from webhook.policy.compiler import PolicyCompiler

API_VERSION = "placer.dev/v1alpha1"
KIND = "PolicyTest"
SUITE_SUFFIX = "-test.yaml"
_CHECKS = ("expected", "patchedResource", "subset", "mutated", "applied", "warnings", "denied")


@dataclass(slots=True)
class CaseResult:
    suite: str
    """The suite's file."""
    name: str
    failures: list[str] = field(default_factory=list)
    resource: str = ""
    """The resource the case is about (`Kind/namespace/name`)."""

    @property
    def passed(self) -> bool:
        return not self.failures


class SuiteError(Exception):
    """The suite file itself is wrong (not YAML, not a PolicyTest, a field of the wrong type)."""


def find_suites(paths: Iterable[str]) -> list[Path]:
    """Suite files: each file given, and every `*-test.yaml` under each directory given."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        found.extend(sorted(path.rglob(f"*{SUITE_SUFFIX}")) if path.is_dir() else [path])
    return list(dict.fromkeys(found))


def run_suite(path: Path, compiler: PolicyCompiler | None = None,
              policies: Callable[[list[str]], list[str]] | None = None) -> list[CaseResult]:
    """Every result of the suite as a case; a suite that cannot be run is one failing case saying why.
    `compiler`: what the suite's policies are compiled with (the target version's field checks); `policies`:
    the policy paths to run it with instead of the suite's own (`placer diff`: the old versions of them)."""
    try:
        suite = _load(path)
        paths = [str(path.parent / p) for p in suite["policies"]]
        report = apply_manifests(
            policy_paths=policies(paths) if policies is not None else paths,
            manifest_paths=[str(path.parent / r) for r in suite["resources"]],
            namespace_labels=suite.get("namespaceLabels") or {},
            operation=str(suite.get("operation") or "CREATE"),
            compiler=compiler,
        )
    except SuiteError as error:
        return [CaseResult(str(path), "suite", [str(error)])]
    problems = [p for p in report.problems if ": denied: " not in p]
    if problems:
        return [CaseResult(str(path), "policies and resources load", problems)]
    by_key = {_key(result): result for result in report.results}
    cases = [_run_case(path, index, expectation, by_key, report) for index, expectation in enumerate(suite["results"])]
    checked = {case.resource for case in cases}
    cases.extend(CaseResult(str(path), f"rules on {key}", rule_errors(result.mutation))
                 for key, result in by_key.items() if key not in checked and rule_errors(result.mutation))
    return cases


def _load(path: Path) -> dict[str, Any]:
    try:
        suite = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise SuiteError(f"{path}: cannot read: {error}") from None
    if not isinstance(suite, dict) or suite.get("kind") != KIND or suite.get("apiVersion") != API_VERSION:
        raise SuiteError(f"{path}: not a {KIND} ({API_VERSION})")
    for name in ("policies", "resources", "results"):
        value = suite.get(name)
        if not isinstance(value, list) or not value:
            raise SuiteError(f"{path}: {name}: a non-empty list is required")
    for index, result in enumerate(suite["results"]):
        where = f"{path}: results[{index}]"
        if not isinstance(result, dict) or not isinstance(result.get("resource"), str):
            raise SuiteError(f"{where}.resource: required (Kind/namespace/name)")
        unknown = sorted(set(result) - {"resource", *_CHECKS})
        if unknown:
            raise SuiteError(f"{where}: unknown field {unknown[0]} (known: resource, {', '.join(_CHECKS)})")
        if not set(result) & set(_CHECKS) - {"subset"}:
            raise SuiteError(f"{where}: nothing to check (one of {', '.join(_CHECKS)})")
    labels = suite.get("namespaceLabels")
    if labels is not None and not isinstance(labels, dict):
        raise SuiteError(f"{path}: namespaceLabels: a map of label: value")
    return suite


def _key(result: ManifestResult) -> str:
    metadata = result.original.get("metadata") or {}
    return f"{result.original.get('kind')}/{result.namespace.name}/{metadata.get('name')}"


def _run_case(
    path: Path, index: int, expectation: dict[str, Any], by_key: dict[str, ManifestResult], report: ApplyReport
) -> CaseResult:
    reference = expectation["resource"]
    parts = reference.split("/")
    key = f"{parts[0]}/{DEFAULT_NAMESPACE}/{parts[1]}" if len(parts) == 2 else reference
    case = CaseResult(str(path), f"results[{index}] {reference}", resource=key)
    result = by_key.get(key)
    if result is None:
        case.failures.append(f"no resource {key} among the suite's resources (known: {', '.join(sorted(by_key))})")
        return case
    mutation = result.mutation
    case.failures.extend(rule_errors(mutation))  # a rule that errors fails the case, whatever else it expects
    if "mutated" in expectation and bool(mutation.patch) != bool(expectation["mutated"]):
        case.failures.append(f"expected {'a' if expectation['mutated'] else 'no'} mutation, got "
                             f"{len(mutation.patch)} patch operation(s)")
    for rule in expectation.get("applied") or []:
        if rule not in mutation.applied:
            case.failures.append(f"rule {rule} did not apply (applied: {', '.join(mutation.applied) or 'none'})")
    for text in expectation.get("warnings") or []:
        if not any(text in warning for warning in mutation.warnings):
            case.failures.append(f"no warning contains {text!r} (warnings: {mutation.warnings or 'none'})")
    if "denied" in expectation:
        denied = expectation["denied"]
        if not mutation.denial and denied is not False:
            case.failures.append("expected a denial, the object was admitted")
        elif mutation.denial and denied is False:
            case.failures.append(f"expected no denial, got: {mutation.denial}")
        elif isinstance(denied, str) and mutation.denial and denied not in mutation.denial:
            case.failures.append(f"denial does not contain {denied!r}: {mutation.denial}")
    if "expected" in expectation:
        case.failures.extend(_compare(expectation["expected"], result.mutated, subset=True))
    if "patchedResource" in expectation:
        try:
            expected = yaml.safe_load((path.parent / str(expectation["patchedResource"])).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            case.failures.append(f"patchedResource: cannot read: {error}")
        else:
            case.failures.extend(_compare(expected, result.mutated, subset=bool(expectation.get("subset"))))
    return case


def _compare(expected: Any, actual: Any, *, subset: bool) -> list[str]:
    seen = _project(expected, actual) if subset else actual
    if seen == expected:
        return []
    before = yaml.safe_dump(expected, sort_keys=True).splitlines()
    after = yaml.safe_dump(seen, sort_keys=True).splitlines()
    diff = "\n".join(difflib.unified_diff(before, after, "expected", "placer", lineterm="", n=2))
    return [f"the object differs{' (subset)' if subset else ''}:\n{diff}"]


def _project(expected: Any, actual: Any) -> Any:
    """`actual` reduced to what `expected` names, so that equality means "subset" and a diff shows only that."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {key: _project(value, actual[key]) for key, value in expected.items() if key in actual}
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [_project(e, a) for e, a in zip(expected, actual, strict=True)]
    return actual


def render_text(cases: Sequence[CaseResult]) -> str:
    lines = []
    for case in cases:
        lines.append(f"{'PASS' if case.passed else 'FAIL'}  {case.suite}  {case.name}")
        lines.extend("      " + line for failure in case.failures for line in failure.splitlines())
    failed = sum(not case.passed for case in cases)
    lines.append(f"{len(cases) - failed} passed, {failed} failed")
    return "\n".join(lines) + "\n"


def render_junit(cases: Sequence[CaseResult]) -> str:
    """JUnit XML, one <testsuite> per suite file, for CI systems."""
    root = ElementTree.Element("testsuites", name="placer test")
    for suite in dict.fromkeys(case.suite for case in cases):
        members = [case for case in cases if case.suite == suite]
        element = ElementTree.SubElement(root, "testsuite", name=suite, tests=str(len(members)),
                                         failures=str(sum(not c.passed for c in members)))
        for case in members:
            testcase = ElementTree.SubElement(element, "testcase", classname=suite, name=case.name)
            if not case.passed:
                failure = ElementTree.SubElement(testcase, "failure", message=case.failures[0].splitlines()[0])
                failure.text = "\n".join(case.failures)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def add_parser(commands: Any) -> None:
    """`placer test` and its flags."""
    test = commands.add_parser("test", help="run policy test suites (*-test.yaml); exit 1 on any failure")
    test.add_argument("suites", nargs="+", metavar="PATH", help="suite files, or directories to search")
    add_output(test, ["text", "junit"], "one line per case, or JUnit XML for CI systems")
    add_target_flags(test)
    test.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    quiet_policy_log()
    suites = find_suites(args.suites)
    if not suites:
        print(f"placer test: no *-test.yaml under {', '.join(args.suites)}", file=sys.stderr)
        return 1
    compiler = compiler_from_flags(args)
    if isinstance(compiler, int):
        return compiler
    cases = [case for suite in suites for case in run_suite(suite, compiler)]
    sys.stdout.write(render_junit(cases) if args.output == "junit" else render_text(cases))
    return 0 if all(case.passed for case in cases) else 1
