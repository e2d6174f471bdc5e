"""PolicyReports: each workload judged as the admission would judge it now (`compliance`), the
workloads watched for it (`workload_book`), the background loop and the report objects it writes.

May import `cluster.client` and the layers below `cluster`.
"""
