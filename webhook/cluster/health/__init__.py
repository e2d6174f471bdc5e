"""Policy health: counts of evaluations and errors from every replica (`recent_counts`,
`replica_reports`), folded into each SchedulingPolicy's status conditions and written back.

May import `cluster.client` and the layers below `cluster`.
"""
