"""The Kubernetes API client: one connection (the only `kubernetes` import), HTTP over urllib3,
chunked watch streams, the reflector (list + watch into a sink), discovery of served APIs, node heartbeats
recognised without decoding, Leases, and the one-object reads a worker or a command needs.

May import policy, workloads and support (never the rest of `cluster`).
"""
