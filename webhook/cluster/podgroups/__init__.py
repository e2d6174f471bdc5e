"""PodGroups Placer keeps for gangs: coscheduling/Volcano groups of marked workloads and
kube-scheduler's native Workload API groups (one per gang, or per operator replica), made from what the
controller watches, never from a request.

May import `cluster.client` and the layers below `cluster`.
"""
