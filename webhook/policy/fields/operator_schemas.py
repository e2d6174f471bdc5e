"""The schemas of the operator kinds Placer admits, for when neither a cluster nor a CRD file gives them.

Offline (`placer lint`, `apply`, `test` without `--kube` or `--crd`), the operators' CustomResourceDefinitions
are not at hand, and a kind of unknown schema lets any field through: `object.spec.replica` would pass the
field checks because some operator kind might have it. So Placer describes each operator kind it admits
itself: every field of its `spec`, with its type where it is a scalar, the path to each pod template (a
core/v1 PodTemplateSpec, or a batch/v1 JobTemplateSpec, checked against the target version's schemas), and
the objects on that path. What lies deeper (policies, autoscaler options, volumes...) is left free-form
(`x-kubernetes-preserve-unknown-fields`): any field is accepted there, and its values are `dyn` to the type
check. A kind's `status` is free-form too.

The fields are those of the operators' CRDs, the union over their served versions (a field an older release
has and a newer one dropped is kept, so that no policy written for either is refused):
- Kubeflow training-operator v1.9.0, manifests/base/crds/kubeflow.org_{pytorchjobs,tfjobs,mpijobs}.yaml
  (pkg/apis/kubeflow.org/v1: PyTorchJobSpec, TFJobSpec, MPIJobSpec, RunPolicy, ReplicaSpec);
- kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1/types.go (MPIJobSpec, RunPolicy, ReplicaSpec);
- ray-project/kuberay ray-operator/config/crd/bases/ray.io_{rayclusters,rayjobs}.yaml (v1: RayClusterSpec,
  HeadGroupSpec, WorkerGroupSpec, RayJobSpec);
- kubernetes-sigs/jobset config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml (v1alpha2: JobSetSpec,
  ReplicatedJob);
- kubernetes-sigs/lws config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml (v1:
  LeaderWorkerSetSpec, LeaderWorkerTemplate);
- kubeflow/spark-operator config/crd/bases/sparkoperator.k8s.io_sparkapplications.yaml (v1beta2:
  SparkApplicationSpec, DriverSpec, ExecutorSpec, DynamicAllocation; a superset of v1beta2-1.3.8's).

A cluster's own schemas (`--kube`, and the served controller) and `--crd FILE` replace these.
"""

from collections.abc import Mapping

from webhook.policy.fields.schemas import KindKey, Schema, custom_resource_schema

_OPEN: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_STRING: Schema = {"type": "string"}
_INTEGER: Schema = {"type": "integer"}
_NUMBER: Schema = {"type": "number"}
_BOOLEAN: Schema = {"type": "boolean"}
_STRINGS: Schema = {"type": "object", "additionalProperties": _STRING}
_STRING_LIST: Schema = {"type": "array", "items": _STRING}
_OPEN_LIST: Schema = {"type": "array", "items": _OPEN}
_POD_TEMPLATE: Schema = {"$ref": "#/$defs/io.k8s.api.core.v1.PodTemplateSpec"}
_JOB_TEMPLATE: Schema = {"$ref": "#/$defs/io.k8s.api.batch.v1.JobTemplateSpec"}


def _object(**properties: Schema) -> Schema:
    return {"type": "object", "properties": properties}


def _kind(spec: Schema) -> Schema:
    return custom_resource_schema(_object(apiVersion=_STRING, kind=_STRING, spec=spec, status=_OPEN))


_RUN_POLICY = _object(
    activeDeadlineSeconds=_INTEGER, backoffLimit=_INTEGER, cleanPodPolicy=_STRING, managedBy=_STRING,
    schedulingPolicy=_OPEN, suspend=_BOOLEAN, ttlSecondsAfterFinished=_INTEGER)
_REPLICA_SPEC = _object(replicas=_INTEGER, restartPolicy=_STRING, template=_POD_TEMPLATE)
_REPLICA_SPECS: Schema = {"type": "object", "additionalProperties": _REPLICA_SPEC}

PYTORCH_JOB = _kind(_object(
    elasticPolicy=_OPEN, nprocPerNode=_STRING, pytorchReplicaSpecs=_REPLICA_SPECS, runPolicy=_RUN_POLICY))
TF_JOB = _kind(_object(
    enableDynamicWorker=_BOOLEAN, runPolicy=_RUN_POLICY, successPolicy=_STRING, tfReplicaSpecs=_REPLICA_SPECS))
MPI_JOB_V1 = _kind(_object(
    cleanPodPolicy=_STRING, mainContainer=_STRING, mpiReplicaSpecs=_REPLICA_SPECS, runPolicy=_RUN_POLICY,
    slotsPerWorker=_INTEGER))
MPI_JOB_V2BETA1 = _kind(_object(
    launcherCreationPolicy=_STRING, mpiImplementation=_STRING, mpiReplicaSpecs=_REPLICA_SPECS,
    runLauncherAsWorker=_BOOLEAN, runPolicy=_RUN_POLICY, slotsPerWorker=_INTEGER, sshAuthMountPath=_STRING))

_HEAD_GROUP = _object(
    enableIngress=_BOOLEAN, headService=_OPEN, ingressOptions=_OPEN, labels=_STRINGS, rayStartParams=_STRINGS,
    resources=_STRINGS, serviceType=_STRING, template=_POD_TEMPLATE)
_WORKER_GROUP = _object(
    groupName=_STRING, idleTimeoutSeconds=_INTEGER, labels=_STRINGS, maxReplicas=_INTEGER, minReplicas=_INTEGER,
    numOfHosts=_INTEGER, priority=_INTEGER, rayStartParams=_STRINGS, replicas=_INTEGER, resources=_STRINGS,
    scaleStrategy=_OPEN, suspend=_BOOLEAN, template=_POD_TEMPLATE)
_RAY_CLUSTER_SPEC = _object(
    authOptions=_OPEN, autoscalerOptions=_OPEN, enableInTreeAutoscaling=_BOOLEAN, gcsFaultToleranceOptions=_OPEN,
    headGroupSpec=_HEAD_GROUP, headServiceAnnotations=_STRINGS, historyServerOptions=_OPEN, managedBy=_STRING,
    networkPolicy=_OPEN, rayVersion=_STRING, suspend=_BOOLEAN, tlsOptions=_OPEN, upgradeStrategy=_OPEN,
    workerGroupSpecs={"type": "array", "items": _WORKER_GROUP})
RAY_CLUSTER = _kind(_RAY_CLUSTER_SPEC)
RAY_JOB = _kind(_object(
    activeDeadlineSeconds=_INTEGER, backoffLimit=_INTEGER, clusterSelector=_STRINGS, deletionStrategy=_OPEN,
    entrypoint=_STRING, entrypointNumCpus=_NUMBER, entrypointNumGpus=_NUMBER, entrypointResources=_STRING,
    jobId=_STRING, managedBy=_STRING, metadata=_STRINGS, preRunningDeadlineSeconds=_INTEGER,
    rayClusterSpec=_RAY_CLUSTER_SPEC, runtimeEnv=_STRING, runtimeEnvYAML=_STRING,
    shutdownAfterJobFinishes=_BOOLEAN, submissionMode=_STRING, submitterConfig=_OPEN,
    submitterPodTemplate=_POD_TEMPLATE, suspend=_BOOLEAN, ttlSecondsAfterFinished=_INTEGER))

JOBSET = _kind(_object(
    coordinator=_OPEN, failurePolicy=_OPEN, managedBy=_STRING, network=_OPEN,
    replicatedJobs={"type": "array", "items": _object(
        dependsOn=_OPEN_LIST, groupName=_STRING, name=_STRING, replicas=_INTEGER, template=_JOB_TEMPLATE)},
    startupPolicy=_OPEN, successPolicy=_OPEN, suspend=_BOOLEAN, ttlSecondsAfterFinished=_INTEGER,
    volumeClaimPolicies=_OPEN_LIST))
LEADER_WORKER_SET = _kind(_object(
    leaderWorkerTemplate=_object(
        leaderTemplate=_POD_TEMPLATE, persistentVolumeClaimRetentionPolicy=_OPEN, restartPolicy=_STRING,
        size=_INTEGER, subGroupPolicy=_OPEN, volumeClaimTemplates=_OPEN_LIST, workerTemplate=_POD_TEMPLATE),
    networkConfig=_OPEN, replicas=_INTEGER, rolloutStrategy=_OPEN, startupPolicy=_STRING))

_SPARK_POD = {
    "affinity": _OPEN, "annotations": _STRINGS, "configMaps": _OPEN_LIST, "coreLimit": _STRING,
    "coreRequest": _STRING, "cores": _INTEGER, "dnsConfig": _OPEN, "env": _OPEN_LIST, "envFrom": _OPEN_LIST,
    "envSecretKeyRefs": {"type": "object", "additionalProperties": _OPEN}, "envVars": _STRINGS, "gpu": _OPEN,
    "hostAliases": _OPEN_LIST, "hostNetwork": _BOOLEAN, "image": _STRING, "initContainers": _OPEN_LIST,
    "javaOptions": _STRING, "labels": _STRINGS, "lifecycle": _OPEN, "memory": _STRING, "memoryLimit": _STRING,
    "memoryOverhead": _STRING, "nodeSelector": _STRINGS, "podSecurityContext": _OPEN, "ports": _OPEN_LIST,
    "priorityClassName": _STRING, "schedulerName": _STRING, "secrets": _OPEN_LIST, "securityContext": _OPEN,
    "serviceAccount": _STRING, "shareProcessNamespace": _BOOLEAN, "sidecars": _OPEN_LIST,
    "template": _OPEN, "terminationGracePeriodSeconds": _INTEGER, "tolerations": _OPEN_LIST,
    "volumeMounts": _OPEN_LIST,
}
"""A Spark driver's and executor's fields (`SparkPodSpec`); `template` is a PodTemplateSpec the operator
merges, kept free-form as its CRD keeps it (`x-kubernetes-preserve-unknown-fields`)."""
SPARK_APPLICATION = _kind(_object(
    arguments=_STRING_LIST, batchScheduler=_STRING, batchSchedulerOptions=_OPEN, deps=_OPEN,
    driver=_object(**_SPARK_POD, kubernetesMaster=_STRING, podName=_STRING, serviceAnnotations=_STRINGS,
                   serviceLabels=_STRINGS),
    driverIngressOptions=_OPEN_LIST, driverPodDisruptionBudget=_BOOLEAN,
    dynamicAllocation=_object(enabled=_BOOLEAN, initialExecutors=_INTEGER, maxExecutors=_INTEGER,
                              minExecutors=_INTEGER, shuffleTrackingEnabled=_BOOLEAN,
                              shuffleTrackingTimeout=_INTEGER),
    executor=_object(**_SPARK_POD, deleteOnTermination=_BOOLEAN, instances=_INTEGER),
    failureRetries=_INTEGER, hadoopConf=_STRINGS, hadoopConfigMap=_STRING, image=_STRING,
    imagePullPolicy=_STRING, imagePullSecrets=_STRING_LIST, mainApplicationFile=_STRING, mainClass=_STRING,
    memoryOverheadFactor=_STRING, mode=_STRING, monitoring=_OPEN, nodeSelector=_STRINGS, proxyUser=_STRING,
    pythonVersion=_STRING, restartPolicy=_OPEN, retryInterval=_INTEGER, sparkConf=_STRINGS,
    sparkConfigMap=_STRING, sparkUIOptions=_OPEN, sparkVersion=_STRING, suspend=_BOOLEAN,
    timeToLiveSeconds=_INTEGER, type=_STRING, volumes=_OPEN_LIST))

OPERATOR_KINDS: Mapping[KindKey, Schema] = {
    ("kubeflow.org", "v1", "PyTorchJob"): PYTORCH_JOB,
    ("kubeflow.org", "v1", "TFJob"): TF_JOB,
    ("kubeflow.org", "v1", "MPIJob"): MPI_JOB_V1,
    ("kubeflow.org", "v2beta1", "MPIJob"): MPI_JOB_V2BETA1,
    ("ray.io", "v1", "RayCluster"): RAY_CLUSTER,
    ("ray.io", "v1", "RayJob"): RAY_JOB,
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"): JOBSET,
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"): LEADER_WORKER_SET,
    ("sparkoperator.k8s.io", "v1beta2", "SparkApplication"): SPARK_APPLICATION,
}
"""Each operator kind and version Placer admits (`webhook.workloads`) that an operator serves."""
