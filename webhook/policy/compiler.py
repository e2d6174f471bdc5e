"""SchedulingPolicy documents -> compiled policies, with every error located.

Compilation happens once, when a policy loads; a request only evaluates. Everything that can be checked
without a request is checked here, so a policy that loads cannot produce an invalid patch.
"""

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.actions.base import ActionSpec
from webhook.actions.parameters import parse_parameters
from webhook.actions.registry import action_specs
from webhook.policy import expression_types as types
from webhook.policy.cel import environment as cel
from webhook.policy.cel.libraries.leaks import LeakAccount
from webhook.policy.errors import DocumentPath, ErrorSink, Locate, PolicyError
from webhook.policy.exemptions import ENFORCED_NEEDS_NAMESPACES, ENFORCEMENTS, parse_exemptions
from webhook.policy.fields.field_check import FieldChecks
from webhook.policy.model import ConditionBatch, Inlined, Policy, Rule, Variable
from webhook.policy.reads import Reads, reads_of
from webhook.policy.selector_fields import parse_selector
from webhook.support.names import (
    dns1123_label_error,
    dns1123_subdomain_error,
    qualified_name_error,
)
from webhook.support.suggestions import unknown_name

API_VERSION = "placer.dev/v1alpha1"
KIND = "SchedulingPolicy"
DEFAULT_PRIORITY = 100

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SPEC_FIELDS = {"priority", "namespaceSelector", "failurePolicy", "enforcement", "exemptions", "variables", "rules"}
_RULE_FIELDS = {"name", "condition", "action", "parameters", "parameterExpressions", "override"}


@dataclass(frozen=True, slots=True)
class CompileResult:
    policy: Policy | None
    errors: tuple[PolicyError, ...]
    name: str | None
    """The policy's name when it could be read, so a caller can keep serving its last good version."""


class PolicyCompiler:
    """Holds the one CEL environment and action table every policy of a snapshot is compiled against."""

    def __init__(self, leaks: LeakAccount | None = None, *, fields: FieldChecks | None = None) -> None:
        self.leaks = leaks if leaks is not None else LeakAccount()
        """What this environment's Kubernetes library calls have leaked (the worker reads it to be replaced)."""
        self.fields = fields if fields is not None else FieldChecks()
        """What every field path an expression reads is checked against (the target version's schemas)."""
        self.environment = cel.new_environment(self.leaks)
        self.actions = action_specs()

    def compile(self, document: Mapping[str, Any], source: str, locate: Locate | None = None) -> CompileResult:
        """Compile one SchedulingPolicy document; return the policy, or every error found in it. `locate`: the
        file's places of the document's values, for errors that name the file's line and column."""
        errors = ErrorSink(source, locate=locate)
        metadata = document.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not name:
            errors.add("metadata.name is required")
            return CompileResult(None, errors.items, None)
        errors.policy = name
        problem = dns1123_subdomain_error(name)
        if problem:
            errors.add(problem, field="metadata.name")
        if document.get("apiVersion") != API_VERSION:
            errors.add(f"must be {API_VERSION}, not {document.get('apiVersion')!r}", field="apiVersion")
        spec = document.get("spec")
        if not isinstance(spec, dict):
            errors.add("spec must be a map", field="spec")
            return CompileResult(None, errors.items, name)
        for unknown in sorted(set(spec) - _SPEC_FIELDS):
            errors.add(unknown_name("unknown field", str(unknown), sorted(_SPEC_FIELDS)), field=f"spec.{unknown}",
                       key=True)

        priority = _priority(spec.get("priority", DEFAULT_PRIORITY), errors)
        selector = parse_selector(spec.get("namespaceSelector"), errors)
        failure_policy = spec.get("failurePolicy", "Ignore")
        if failure_policy not in ("Ignore", "Fail"):
            errors.add(f"must be Ignore or Fail, not {failure_policy!r}", field="spec.failurePolicy")
        enforcement = spec.get("enforcement", "Advisory")
        if enforcement not in ENFORCEMENTS:
            errors.add(f"must be Advisory, Enforced or Audit, not {enforcement!r}", field="spec.enforcement")
        exemptions = parse_exemptions(spec.get("exemptions"), errors.add)
        if enforcement == "Enforced" and spec.get("namespaceSelector") is None:
            errors.add(ENFORCED_NEEDS_NAMESPACES, field="spec.namespaceSelector")
        variables = self._variables(spec.get("variables"), errors)
        rules = self._rules(spec.get("rules"), variables, errors)
        if errors.items:
            return CompileResult(None, errors.items, name)
        metadata_map = metadata if isinstance(metadata, dict) else {}
        generation = metadata_map.get("generation")
        batches, combined = self._condition_batches(rules)
        policy = Policy(
            name=name,
            priority=priority,
            namespace_selector=selector,
            failure_policy=failure_policy,
            enforcement=enforcement,
            exemptions=exemptions,
            variables=tuple(variables.values()),
            rules=tuple(rules),
            source=source,
            generation=generation if isinstance(generation, int) else None,
            conditions=batches,
            combined=combined,
            document=document,
        )
        return CompileResult(policy, (), name)

    def _condition_batches(self, rules: list[Rule]) -> tuple[tuple[ConditionBatch, ...], ConditionBatch | None]:
        """One program for the conditions that need no policy variables, one for those that do (see
        ConditionBatch and Policy.conditions), and, when there are both, one for all of them
        (Policy.combined).

        A condition reading variables is batched with its variables written in: evaluated alone it needs the
        variables evaluated first and a second activation holding them, whose first evaluation converts the
        whole object again — three CEL calls and a conversion where the batch element costs next to nothing.
        Its result is the same: CEL has no side effects, and the engine falls back to the inlined condition
        whenever a variable fails. A single plain condition gains nothing from a batch of one.
        """
        plain = [(rule.name, rule.condition.source) for rule in rules
                 if rule.condition is not None and not rule.condition.reads_variables]
        inlined = [(rule.name, rule.inlined.condition.source) for rule in rules
                   if rule.condition is not None and rule.condition.reads_variables
                   and rule.inlined is not None and rule.inlined.condition is not None]
        plain_batch = self._condition_batch(plain) if len(plain) >= 2 else None
        inlined_batch = self._condition_batch(inlined)
        if plain_batch is None or inlined_batch is None:
            return tuple(batch for batch in (plain_batch, inlined_batch) if batch is not None), None
        return (plain_batch, inlined_batch), self._condition_batch(plain + inlined)

    def _condition_batch(self, conditions: list[tuple[str, str]]) -> ConditionBatch | None:
        if not conditions:
            return None
        source = "[" + ", ".join(f"({condition})" for _, condition in conditions) + "]"
        try:
            program = cel.compile_expression(self.environment, source)
        except cel.CelCompileError:
            return None  # each condition compiled alone; the engine then evaluates them one by one
        return ConditionBatch(program, tuple(name for name, _ in conditions))

    def _variables(self, raw: Any, errors: ErrorSink) -> dict[str, Variable]:
        variables: dict[str, Variable] = {}
        if raw is None:
            return variables
        if not isinstance(raw, list):
            errors.add("must be a list of {name, expression}", field="spec.variables")
            return variables
        for index, item in enumerate(raw):
            where = f"spec.variables[{index}]"
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                errors.add("needs a name and an expression", field=where)
                continue
            name = item["name"]
            where = f"variables.{name}"
            at = ("spec", "variables", index)
            if not _IDENTIFIER.match(name):
                errors.add("name must be a CEL identifier", field=where, path=(*at, "name"))
                continue
            if name in variables:
                errors.add("duplicate variable name", field=where, path=(*at, "name"))
                continue
            program = self._program(item.get("expression"), where, errors, variables, path=(*at, "expression"))
            if program is None:
                continue
            for reference in program.reads_variables - set(variables):
                position = cel.variable_reference_position(program.source, reference)
                errors.add(f"{position}: variables.{reference} is not declared before it", field=where,
                           path=(*at, "expression"), text=program.source)
            variables[name] = Variable(name, program)
        return variables

    def _rules(self, raw: Any, variables: Mapping[str, Variable], errors: ErrorSink) -> list[Rule]:
        if not isinstance(raw, list) or not raw:
            errors.add("at least one rule is required", field="spec.rules")
            return []
        rules: list[Rule] = []
        seen: set[str] = set()
        for index, item in enumerate(raw):
            if not isinstance(item, dict):
                errors.add("must be a map", field=f"spec.rules[{index}]")
                continue
            name = item.get("name")
            if not isinstance(name, str) or not name:
                errors.add("name is required", field=f"spec.rules[{index}]")
                continue
            rule_errors = errors.for_rule(name, index)
            problem = dns1123_label_error(name)
            if problem:
                rule_errors.add(problem, field="name")
            if name in seen:
                rule_errors.add("duplicate rule name in this policy", field="name")
            seen.add(name)
            rule = self._rule(name, item, variables, rule_errors)
            if rule is not None:
                rules.append(rule)
        return rules

    def _rule(
        self, name: str, item: Mapping[str, Any], variables: Mapping[str, Variable], errors: ErrorSink
    ) -> Rule | None:
        count = len(errors.items)
        for unknown in sorted(set(item) - _RULE_FIELDS):
            errors.add(unknown_name("unknown field", str(unknown), sorted(_RULE_FIELDS)), field=unknown, key=True)
        action = self.actions.get(item.get("action", ""))
        if action is None:
            errors.add(unknown_name(f"unknown action {item.get('action')!r}", str(item.get("action", "")),
                                    sorted(self.actions)), field="action")
        condition = None
        if item.get("condition") is not None:
            condition = self._program(item["condition"], "condition", errors, variables, expect=types.CONDITION)
            if condition is not None and condition.returns not in ("bool", "dyn") and self.fields.types() is None:
                errors.add(f"must return bool, not {condition.returns}", field="condition")
        override = item.get("override", False)
        if not isinstance(override, bool):
            errors.add("must be true or false", field="override")
        raw_parameters = item.get("parameters") or {}
        if not isinstance(raw_parameters, dict):
            errors.add("must be a map", field="parameters")
            raw_parameters = {}
        expressions = self._parameter_expressions(item.get("parameterExpressions"), action, variables, errors)
        parameters: dict[str, Any] = {}
        if action is not None:
            parameters, problems = parse_parameters(action, raw_parameters, deferred=frozenset(expressions))
            for parameter, message in problems:  # an unknown parameter is placed on its name
                misspelt = action.free_form is None and parameter in raw_parameters and action.param(parameter) is None
                errors.add(message, field=f"parameters.{parameter}", key=misspelt)
        programs = [program for program in (condition, *expressions.values()) if program is not None]
        reads = _needed_variables(programs, variables, errors)
        if len(errors.items) > count or action is None:
            return None
        return Rule(
            name=name,
            action=action,
            condition=condition,
            parameters=parameters,
            raw_parameters=dict(raw_parameters),
            parameter_expressions=expressions,
            override=override,
            reads_variables=reads,
            reads=_union(reads_of(program.fields) for program in
                         (*programs, *(variables[name].program for name in reads if name in variables))),
            inlined=self._inlined(condition, expressions, variables) if reads else None,
        )

    def _inlined(
        self, condition: cel.Program | None, expressions: Mapping[str, cel.Program], variables: Mapping[str, Variable]
    ) -> Inlined | None:
        """The rule's programs with its variables written in (see Rule.inlined); None if one does not compile
        that way (e.g. `has(variables.x)`), which leaves the rule to its variables' outcome as it is."""
        sources = {name: variable.program.source for name, variable in variables.items()}
        try:
            inlined_condition = (
                cel.compile_expression(self.environment, cel.inline_variables(condition.source, sources))
                if condition is not None
                else None
            )
            inlined_expressions = {
                name: cel.compile_expression(self.environment, cel.inline_variables(program.source, sources))
                for name, program in expressions.items()
            }
        except cel.CelCompileError:
            return None
        return Inlined(inlined_condition, inlined_expressions)

    def _parameter_expressions(
        self, raw: Any, action: ActionSpec | None, variables: Mapping[str, Variable], errors: ErrorSink
    ) -> dict[str, cel.Program]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            errors.add("must be a map of parameter name to CEL expression", field="parameterExpressions")
            return {}
        programs: dict[str, cel.Program] = {}
        for parameter, source in raw.items():
            where = f"parameterExpressions.{parameter}"
            if action is not None and action.free_form is None and action.param(str(parameter)) is None:
                errors.add(unknown_name(f"unknown parameter for {action.name}", str(parameter),
                                        [param.name for param in action.params]), field=where, key=True)
                continue
            if action is not None and action.free_form is not None:
                problem = qualified_name_error(str(parameter))
                if problem:
                    errors.add(f"key {problem}", field=where)
                    continue
            expect = types.parameter(action, str(parameter)) if action is not None else None
            program = self._program(source, where, errors, variables, expect=expect)
            if program is not None:
                programs[str(parameter)] = program
        return programs

    def _program(self, source: Any, where: str, errors: ErrorSink, variables: Mapping[str, Variable], *,
                 expect: types.Expected | None = None, path: DocumentPath | None = None) -> cel.Program | None:
        """Compile, field-check and type-check one expression; every error is placed on its character."""
        if not isinstance(source, str) or not source.strip():
            errors.add("must be a non-empty CEL expression string", field=where, path=path)
            return None
        try:
            program = cel.compile_expression(self.environment, source, keep_tree=True)
        except cel.CelCompileError as error:
            errors.add(str(error), field=where, path=path, text=source)
            return None
        problems = self.fields.problems(program)
        check = self.fields.types()
        if check is not None and not problems:
            sources = {name: variable.program.source for name, variable in variables.items()}
            problems = types.type_errors(check, self.environment, source, sources, expect)
        for problem in problems:  # the policy does not load; the program still stands for its name
            errors.add(problem, field=where, path=path, text=source)
        return dataclasses.replace(program, tree=None, offsets={}, compiled_text="")


def _priority(value: Any, errors: ErrorSink) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(f"must be an integer, not {value!r}", field="spec.priority")
        return DEFAULT_PRIORITY
    return value


def _needed_variables(
    programs: list[cel.Program], variables: Mapping[str, Variable], errors: ErrorSink
) -> frozenset[str]:
    """Variables the programs read, with the variables those read, transitively (for lazy evaluation)."""
    needed: set[str] = set()
    pending = [(name, program) for program in programs for name in program.reads_variables]
    while pending:
        name, program = pending.pop()
        if name in needed:
            continue
        if name not in variables:
            position = cel.variable_reference_position(program.source, name)
            errors.add(f"{position}: undeclared variable variables.{name}", field="condition",
                       text=program.source)
            continue
        needed.add(name)
        pending.extend((dependency, variables[name].program) for dependency in variables[name].program.reads_variables)
    return frozenset(needed)


def _union(items: Iterable[Reads]) -> Reads:
    total = Reads()
    for item in items:
        total = total | item
    return total
