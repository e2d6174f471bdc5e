"""The spot ledger: each workload's live pods by capacity class, published for `spot-share`.

May import `cluster.client` and the layers below `cluster`.
"""
