"""The admission engine: pure functions from a request and a policy snapshot to a mutation. No I/O."""
