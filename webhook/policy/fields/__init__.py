"""Field checks: every field path a policy's CEL reads, checked against the target Kubernetes
version's schemas (and the cluster's CRDs), with the variables' shapes.

May import `policy.cel`, workloads and support.
"""
