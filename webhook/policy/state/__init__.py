"""The state directory the controller publishes and workers read: keyed shards written by rename,
namespaces, nodes, claims, volumes, devices and spot shares, and the cluster policies themselves.

May import `policy.sources`, the `policy` core and everything below.
"""
