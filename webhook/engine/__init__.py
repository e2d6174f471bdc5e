"""The admission engine: pure functions from a request and a policy snapshot to a mutation. No I/O.

May import policy, actions, gang, workloads, pods and support.
"""
