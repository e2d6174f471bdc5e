"""The scheduling actions (docs/actions.md): one module per topic, one function per action.

Each action declares its parameters (validated when policies load, and again for values computed by
`parameterExpressions`) and changes a pod template in place, idempotently.

May import gang, workloads, pods and support.
"""
