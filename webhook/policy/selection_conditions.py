"""The conditions of every policy a namespace selects, evaluated in one CEL call per template.

Each policy already evaluates its rules' conditions in one batch (`ConditionBatch`); with ten policies that
is still ten calls, each paying the runtime's fixed cost (a few µs) and each evaluating again a condition
another policy shares word for word (`namespaceObject.metadata.labels['team'] == 'ml'`). A selection's
conditions are the same for every request that selects it, so they are compiled once into one list, each
distinct condition once, and every policy's batch is read from it: the values are exactly the policies' own
batches' (CEL has no side effects; the same text on the same activation gives the same value).

When the list fails as a whole (one element errors or reads a missing key, as a whole list does, or the
list's loops together run out of the runtime's iteration budget, which one evaluation shares), each
policy's own batch is evaluated as before, which then finds the rule with the precise outcome: nothing but
the cost changes. A selection whose list keeps failing stops being tried; a selection used once is not
compiled at all (compiling fifty conditions takes milliseconds, which a request used once would pay), nor
is a selection the snapshot does not keep (rules cut down for one request).
"""

from typing import Any

from webhook.policy.cel import environment as cel
from webhook.policy.model import Policy, Rule
from webhook.policy.observed_memo import ObservedMemo

COMPILE_AT_USE = 2
"""The evaluation at which a selection's list is compiled: one evaluated once (one template of one request)
costs nothing more."""
BOOLEANS = "list<bool>"
"""The checked type of a batch whose every condition is typed bool."""
FAILURES_ALLOWED = 8
"""Failures of the list past which (and past twice its successes) a selection stops trying it."""


class SelectionConditions:
    """One selection's conditions as one list: per policy, which element holds each batched rule's value."""

    def __init__(self, policies: tuple[Policy, ...], environment: Any, *, kept: bool = True) -> None:
        """`kept`: the snapshot keeps the selection for the requests to come; else the list is never tried."""
        self._environment = environment
        elements: dict[str, int] = {}
        layout: list[tuple[tuple[int, int], ...] | None] = []
        for policy in policies:
            batched = _batched_rules(policy)
            if batched is None:
                layout.append(None)
                continue
            index = {rule.name: position for position, rule in enumerate(policy.rules)}
            layout.append(tuple((index[rule.name], elements.setdefault(_element(rule), len(elements)))
                                for rule in batched))
        self._layout = tuple(layout)
        """Per policy (in the selection's order): (rule position, element) for each rule its batches decide,
        or None when the policy has no batch."""
        self._sources = tuple(elements)
        self._widths = tuple(len(policy.rules) for policy in policies)
        self.useful = sum(entry is not None for entry in layout) >= 2
        """Whether one call replaces at least two: with one batched policy, its own batch is as cheap."""
        self._program: cel.Program | None = None
        self._uses = 0
        self._successes = 0
        self._failures = 0
        self._given_up = not (self.useful and kept)

    @property
    def size(self) -> int:
        """Distinct conditions in the list."""
        return len(self._sources)

    @property
    def tried(self) -> tuple[int, int]:
        """Evaluations of the list so far: (successes, failures)."""
        return self._successes, self._failures

    def values(self, activation: cel.Activation, memo: ObservedMemo | None = None
               ) -> list[list[bool | None] | None] | None:
        """Per policy of the selection, its batched rules' values by rule position (None: the rule is evaluated
        alone, or the policy has no batch); None when the list is not tried or failed (evaluate per policy).
        `memo`: the snapshot's outcomes by observed fields, for `activation` without policy variables."""
        if self._given_up:
            return None
        program = self._program
        if program is None:
            self._uses += 1
            if self._uses < COMPILE_AT_USE:
                return None
            program = self._compile()
            if program is None:
                return None
        # The runtime's iteration budget counts the whole list's loops together: a list that runs out of it is
        # a failure, and each policy's batch (with its own budget, and its own step-wise evaluation) decides.
        result = (memo.evaluate(program, activation, stepwise_on_budget=False) if memo is not None
                  else cel.evaluate(program, activation, stepwise_on_budget=False))
        found = result.value if result.missing is None and result.error is None else None
        if not isinstance(found, list) or len(found) != len(self._sources):
            self._failures += 1
            if self._failures > FAILURES_ALLOWED and self._failures > 2 * self._successes:
                self._given_up = True
            return None
        self._successes += 1
        decided: list[list[bool | None] | None] = []
        for policy_layout, width in zip(self._layout, self._widths, strict=True):
            if policy_layout is None:
                decided.append(None)
                continue
            values: list[bool | None] = [None] * width
            for position, element in policy_layout:
                values[position] = found[element]  # a bool: only batches typed list<bool> are in the list
            decided.append(values)
        return decided

    def _compile(self) -> cel.Program | None:
        source = "[" + ", ".join(f"({condition})" for condition in self._sources) + "]"
        try:
            self._program = cel.compile_expression(self._environment, source)
        except cel.CelCompileError:
            self._given_up = True  # each policy's batch compiled: they are evaluated as before
            return None
        return self._program


def _batched_rules(policy: Policy) -> list[Rule] | None:
    """The rules whose condition the policy's own batches decide, or None when it has none, or when a batch
    is not typed a list of bools: one such element makes the whole list a list of dyn, whose elements are
    then each converted apart (`cel.evaluate`), and the policy's own batch costs the list nothing."""
    batches = (policy.combined,) if policy.combined is not None else policy.conditions
    if any(batch.program.returns != BOOLEANS for batch in batches if batch is not None):
        return None
    names = {name for batch in batches if batch is not None for name in batch.rules}
    if not names:
        return None
    return [rule for rule in policy.rules if rule.name in names]


def _element(rule: Rule) -> str:
    """The rule's condition as its policy's batch holds it: its own text, or with the variables written in."""
    if rule.condition is not None and not rule.condition.reads_variables:
        return rule.condition.source
    assert rule.inlined is not None and rule.inlined.condition is not None, "a batched condition reads no variable"
    return rule.inlined.condition.source
