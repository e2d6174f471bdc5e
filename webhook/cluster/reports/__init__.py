"""PolicyReports: each workload judged as the admission would judge it now (`compliance`), the
workloads watched for it (`workload_book`), the background loop, the report objects (one per workload) and
their writer (only what changed, at a bounded rate).

May import `cluster.client` and the layers below `cluster`.
"""
