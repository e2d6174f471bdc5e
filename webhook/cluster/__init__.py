"""The cluster side: the controller process (`controller`) that lists and watches the API server and
keeps what Placer owns there, split by what it keeps: the API client and watches (`client`), PodGroups and
native groups (`podgroups`), PolicyReports (`reports`), policy health and status (`health`), the spot
ledger (`spot`); and the fail-closed namespace labels of Enforced policies (`enforce_labels`).

Order inside: `controller`, `enforce_labels` -> `reports`, `health`, `podgroups`, `spot` -> `client`.
May import admission, placement, engine, policy, actions, gang, workloads, pods and support.
"""
