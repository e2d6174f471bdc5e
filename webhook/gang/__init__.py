"""Gang scheduling: each scheduler's keys, and the group identity and size every member shares.

May import workloads, pods and support.
"""
