"""A load-time bound on what an expression costs, where it can be known before any object is seen.

Kubernetes estimates a cost per expression when it is written and refuses one whose estimate exceeds its
budget; objects' list sizes come from their OpenAPI schema there. Placer's variables are `dyn` (no schema),
so the loops it can count when a policy loads are those over literal lists and `lists.range(n)`: an
expression whose nested loops over those alone take more than `ESTIMATE_LIMIT` steps can never run within
an admission and is refused with the count. Loops over an object's lists are bounded when they run
(`stepwise`: the runtime's 10,000 steps per evaluation, step-wise evaluation beyond it, the deadline).
"""

from webhook.policy.cel.checked_ast import NO_LITERAL, Expr

ESTIMATE_LIMIT = 1_000_000
"""Comprehension steps over literal ranges an expression may take: Kubernetes' per-call cost limit."""


def literal_steps(node: Expr) -> int:
    """Comprehension steps the expression takes whatever the object: loops over literal ranges, nested
    loops multiplied (a loop over an object's list counts as one pass, as its size is not known)."""
    if node.kind == "comprehension":
        iter_range, accu_init, condition, step, result = node.loop
        size = _literal_size(iter_range)
        body = literal_steps(condition) + literal_steps(step)
        return literal_steps(iter_range) + literal_steps(accu_init) + literal_steps(result) + \
            (size if size is not None else 1) * (1 + body) - (0 if size is not None else 1)
    return sum(literal_steps(operand) for operand in node.operands)


def _literal_size(node: Expr) -> int | None:
    if node.kind == "list":
        return len(node.operands)
    if node.kind == "call" and node.function == "lists.range" and len(node.args) == 1:
        count = node.args[0].literal
        if isinstance(count, int) and count is not NO_LITERAL:
            return max(count, 0)
    return None
