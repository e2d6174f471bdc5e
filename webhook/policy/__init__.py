"""SchedulingPolicy: the model (`model`, `exemptions`, `reads`, `errors`), its compiler and the immutable
snapshot a request sees, over CEL (`cel/`) and field checks (`fields/`); the sources policies come from
(`sources/`) and the state directory the controller publishes (`state/`).

Order inside: `state` -> `sources` -> the core modules here -> `fields` -> `cel`.
May import actions, gang, workloads, pods and support.
"""
