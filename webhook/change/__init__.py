"""What a change to the policies would do before it is served: to the live cluster's workloads
(`kubectl placer preview`) and to manifests under review (`placer diff`). Each workload is judged twice by the
admission engine, under the policies of today and of after the change (`judging`, `workload_change`); for
those whose result changes, whether bringing them in step starts a rollout (`rollout`) and whether their pods
still have somewhere to run (`stranding`, `gang_fit`, `spot_classes`). `render` and `markdown` print it.

May import cluster, admission, placement, engine, policy, actions, gang, workloads, pods and support.
"""
