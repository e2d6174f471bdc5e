"""A policy's batched conditions and lazily evaluated variables for one template's pass."""

from collections.abc import Mapping
from typing import Any

from webhook.policy.cel import environment as cel
from webhook.policy.model import ConditionBatch, Policy, Rule
from webhook.policy.namespace_facts import NamespaceFacts
from webhook.policy.observed_memo import ObservedMemo, keepable


class PolicyScope:
    """A policy's conditions and variables for one template: the conditions evaluated in their batches when
    the policy's turn comes, the variables on first use and at most once (lazily)."""

    def __init__(self, policy: Policy, data: Mapping[str, Any], activation: Any, environment: Any,
                 decided: list[bool | None] | None = None, *, facts: NamespaceFacts | None = None,
                 memo: ObservedMemo | None = None) -> None:
        """`decided`: the values of the policy's batched conditions, when the selection's list has them
        (`SelectionConditions`); else its own batches are evaluated. `facts`: those of the request's
        namespace, which keep the outcome of expressions that read only the namespace; `memo`, the snapshot's
        outcomes by observed fields (`evaluate`)."""
        self._policy = policy
        self._facts = facts
        self._memo = memo
        self._data = data
        self._base_activation = activation
        self._environment = environment
        self._values: dict[str, Any] = {}
        self._failures: dict[str, cel.Result] = {}
        self._activation = activation
        self.batched = decided if decided is not None else self._batched_conditions()
        """Per rule (in the policy's order), its condition's value from a batch, or None to evaluate it alone:
        no condition, not batched, or its batch failed (the one-by-one evaluation then gives each rule its
        own outcome and message)."""

    @property
    def base(self) -> Any:
        """The activation without policy variables."""
        return self._base_activation

    def _batched_conditions(self) -> list[bool | None]:
        """The policy's batches evaluated on the template's base activation (a batch reads no policy variable:
        those are written in): both in one call when the policy has both and neither fails, else each."""
        policy = self._policy
        values: list[bool | None] = [None] * len(policy.rules)
        if policy.combined is not None and self._fill(values, policy.combined, policy.combined_positions):
            return values
        for batch, positions in zip(policy.conditions, policy.positions, strict=True):
            self._fill(values, batch, positions)
        return values

    def _fill(self, values: list[bool | None], batch: ConditionBatch, positions: tuple[int, ...]) -> bool:
        """Set the value of each rule the batch decides; False when the batch failed as a whole."""
        result = self.evaluate(batch.program, self._base_activation)
        found = result.value if result.missing is None and result.error is None else None
        if not isinstance(found, list) or len(found) != len(positions):
            return False
        for position, value in zip(positions, found, strict=True):
            if value is True or value is False:  # a non-bool is reported by the rule's own evaluation
                values[position] = value
        return True

    def evaluate(self, program: cel.Program, activation: Any) -> cel.Result:
        """`cel.evaluate`, or an outcome kept: for a program that reads only the namespace, the namespace's
        (`NamespaceFacts`); on the template's variables without policy variables, the one kept for the same
        observed fields (`ObservedMemo`).

        A program that reads only the namespace (`parameterExpressions: {pool:
        "namespaceObject.metadata.labels['pool']"}`) gives every request in the namespace the same outcome, so it
        is evaluated once per namespace and program. Kept: a scalar, a list of booleans (a batch of conditions)
        or a missing key; an error is evaluated again each time (one may come of the deadline).
        """
        facts = self._facts
        if facts is not None and program.reads_only_namespace:
            result: cel.Result | None = facts.recall(program)
            if result is None:
                result = cel.evaluate(program, activation)
                if keepable(result):
                    facts.remember(program, result)
            return result
        if self._memo is not None and activation is self._base_activation:
            return self._memo.evaluate(program, activation)
        return cel.evaluate(program, activation)

    def activation_for(self, rule: Rule) -> tuple[Any, cel.Result | None]:
        """An activation with every variable the rule needs, or the failure of one of them."""
        if not rule.reads_variables:
            return self._base_activation, None
        pending = [v for v in self._policy.variables if v.name in rule.reads_variables and v.name not in self._values]
        for variable in pending:
            if variable.name in self._failures:
                return None, self._failures[variable.name]
            result = cel.evaluate(variable.program, self._activation)
            if result.missing is not None or result.error is not None:
                where = f"variables.{variable.name}: "
                failure = cel.Result(
                    missing=where + result.missing if result.missing else None,
                    error=where + (result.error or "") if result.error else None,
                )
                self._failures[variable.name] = failure
                return None, failure
            self._values[variable.name] = result.value
            self._activation = cel.activation(self._environment, {**self._data, "variables": dict(self._values)},
                                             self._base_activation.deadline)
        for name in rule.reads_variables:
            if name in self._failures:
                return None, self._failures[name]
        return self._activation, None
