"""`placer export`: SchedulingPolicies as MutatingAdmissionPolicies the API server runs itself (no webhook).

May import policy, actions, workloads, pods and support.
"""
