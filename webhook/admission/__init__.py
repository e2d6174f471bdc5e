"""The admission path: an AdmissionReview decoded (precise 400s), the opt-in and namespace checks,
the engine run, the denial or patch answered (`pipeline`); the validating endpoint for SchedulingPolicies
(`validation`); and the same path run in one process for `placer apply | lint | test` (`offline`).

May import placement, engine, policy, actions, gang, workloads, pods and support.
"""
