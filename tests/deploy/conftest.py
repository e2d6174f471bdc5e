from tests.kube.conftest import api, apiserver, kubeconfig  # noqa: F401 - the recorded API server fixtures
