"""Outcomes of expressions kept by what they can observe: the same observed fields give the same outcome.

The engine hands CEL each variable cut down to what the snapshot's expressions can observe of it
(`PolicySnapshot.observable`, `cel.field_reads`): an expression evaluated on that cut gives what it gives on
the whole object. So its outcome is a function of the cut alone, and pods that agree on every observed
field (the same resources and labels in one namespace: a Job's or a CI system's pods, replicas of one shape)
get the same outcome. Here the outcome of each expression evaluated on a template's variables is kept under
those variables' JSON text; a pass whose expressions are all found never binds the variables for the runtime
(`cel.Activation`), which is most of an evaluation's cost.

Kept: a scalar, a list of booleans (a batch of conditions) or a missing key; never an error (one may be the
deadline's). Not kept for: variables whose text is longer than KEY_BYTES or holds a `null` (JSON writes an
infinite or NaN number as `null` too: the text would not tell them apart). One memo per snapshot: a new
snapshot starts with none. Where observed fields differ from pod to pod (a policy reading names or uids),
the memo finds nothing: after TRIAL lookups finding less than one in eight, keys are no longer made, and
lookups are tried again after RETRY_AFTER passes.
"""

from typing import Any

import orjson

from webhook.policy.cel import environment as cel

KEY_BYTES = 2048
"""The longest variables' text a key is made of."""
KEPT = 1024
"""Outcomes kept; past this, they are dropped and worked out again."""
TRIAL = 256
"""Lookups after which the memo stops making keys unless one in eight found its outcome."""
RETRY_AFTER = 4096
"""Passes without keys after which lookups are tried again."""
_SCALARS = (str, int, float, bool, type(None))


class ObservedMemo:
    """Outcomes by program and by the variables' text (see the module docstring)."""

    __slots__ = ("_hits", "_kept", "_lookups", "_resting")

    def __init__(self) -> None:
        self._kept: dict[tuple[int, bytes], tuple[cel.Program, cel.Result]] = {}
        self._lookups = 0
        self._hits = 0
        self._resting = 0
        """Passes left without keys (the memo found too little); 0: making keys."""

    @property
    def tried(self) -> tuple[int, int]:
        """(lookups, outcomes found) since keys were last (re)started."""
        return self._lookups, self._hits

    def evaluate(self, program: cel.Program, activation: cel.Activation, *, stepwise_on_budget: bool = True
                 ) -> cel.Result:
        """`cel.evaluate(program, activation)`, or the outcome kept for the same program on the same variables.
        `activation` must hold the template's variables as `observable` cuts them (no policy variable)."""
        key = self._key(activation)
        if key is None:
            return cel.evaluate(program, activation, stepwise_on_budget=stepwise_on_budget)
        self._lookups += 1
        found = self._kept.get((id(program), key))
        if found is not None and found[0] is program:
            self._hits += 1
            return found[1]
        result = cel.evaluate(program, activation, stepwise_on_budget=stepwise_on_budget)
        if keepable(result):
            if len(self._kept) >= KEPT:
                self._kept.clear()
            self._kept[(id(program), key)] = (program, result)
        if self._lookups >= TRIAL and self._hits * 8 < self._lookups:
            self._resting, self._lookups, self._hits = RETRY_AFTER, 0, 0
        return result

    def _key(self, activation: cel.Activation) -> bytes | None:
        key = activation.memo_key
        if key is False:
            key = activation.memo_key = self._key_of(activation.data)
        return key if isinstance(key, bytes) else None

    def _key_of(self, data: Any) -> bytes | None:
        if self._resting:
            self._resting -= 1
            return None
        try:
            text = orjson.dumps(data)
        except (orjson.JSONEncodeError, TypeError):
            return None  # a value only the runtime takes (none in a decoded review): evaluated each time
        if len(text) > KEY_BYTES or b"null" in text:
            return None
        return text


def keepable(result: cel.Result) -> bool:
    """An outcome every request may be handed: a missing key, a scalar or a list of booleans (which no caller
    changes); never an error (one may be the deadline's)."""
    if result.missing is not None:
        return True
    if result.error is not None:
        return False
    value = result.value
    if isinstance(value, list):
        return all(item is True or item is False for item in value)
    return isinstance(value, _SCALARS)
