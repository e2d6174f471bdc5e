"""Placement facts: whether the nodes, volumes, devices and capacity a mutated pod will ask for exist
(`feasibility`, `node_fit`, `pool_fit`, `gang_capacity`, `claims`, `share_counts`). They become warnings and
`-o explain` lines; they never change a patch.

May import engine, policy, actions, gang, workloads, pods and support.
"""
