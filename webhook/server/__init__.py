"""`placer serve`: the application in granian worker processes, and what the main process supervises.

May import cluster, admission, placement, engine, policy, actions, gang, workloads, pods and support.
"""
