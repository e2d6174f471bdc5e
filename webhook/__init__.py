"""Placer: a Kubernetes mutating admission webhook that applies CEL scheduling policies to workloads."""

__version__ = "0.1.0"
