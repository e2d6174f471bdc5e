"""The leaves: JSON types and bytes, names and label selectors, JSON Patch diffs, settings, logging,
metrics and their counter files, certificates' shared helpers. Nothing here knows about policies.

May import nothing else of `webhook`.
"""
