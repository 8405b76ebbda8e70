"""What a replica's ``tensorflow`` container is given to report its training progress
(docs/progress.md): the endpoint's URL, a service-account token for this job's
audience, and the CA to verify the endpoint with.

- env ``TFJOB_PROGRESS_URL``: ``{base}/v1/namespaces/{ns}/tfjobs/{name}/progress``;
- env ``TFJOB_PROGRESS_TOKEN_FILE`` and ``TFJOB_PROGRESS_CA_FILE``: files of the
  projected volume ``tfjob-progress``, mounted read-only at MOUNT_PATH: the token the
  kubelet requests for the pod's service account with the job's audience (an hour,
  rotated by the kubelet at 80% of its life), and ``ca.crt`` of the ConfigMap
  ``tfjob-progress-ca`` the controller keeps in the job's namespace. The ConfigMap is
  optional to the kubelet: a pod whose namespace has none yet starts all the same, and
  its reports fail verification until it appears.

Nothing is given when the controller's endpoint is off (``Reporting`` None), when the
job opts out (annotation ``training.kubeflow.org/progress-reporting: "false"``), or to
a container that sets any of these variables itself (the user's wins). A template
volume or mount of the same name is the user's too: the pod is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconcile.api.names import PROGRESS_REPORTING_ANNOTATION, tensorflow_container_index

URL_ENV = "TFJOB_PROGRESS_URL"
TOKEN_FILE_ENV = "TFJOB_PROGRESS_TOKEN_FILE"
CA_FILE_ENV = "TFJOB_PROGRESS_CA_FILE"
ENVS = (URL_ENV, TOKEN_FILE_ENV, CA_FILE_ENV)
VOLUME = "tfjob-progress"
MOUNT_PATH = "/var/run/secrets/tfjob.kubeflow.org/progress"
TOKEN_PATH = "token"
CA_CONFIGMAP = "tfjob-progress-ca"
CA_KEY = "ca.crt"
DEFAULT_TOKEN_SECONDS = 3600
AUDIENCE_PREFIX = "tfjob.kubeflow.org"


@dataclass(frozen=True, slots=True)
class Reporting:
    """The controller's endpoint, as pods reach it."""

    base_url: str  # "https://tfjob-controller.tfjob-system.svc:10443"
    token_seconds: int = DEFAULT_TOKEN_SECONDS


def audience(namespace: str, name: str) -> str:
    """The audience of the tokens job ``namespace/name``'s pods report with."""
    return f"{AUDIENCE_PREFIX}/{namespace}/{name}"


def progress_path(namespace: str, name: str) -> str:
    """Where job ``namespace/name``'s pods report, on the endpoint."""
    return f"/v1/namespaces/{namespace}/tfjobs/{name}/progress"


def report_url(base_url: str, namespace: str, name: str) -> str:
    return base_url.rstrip("/") + progress_path(namespace, name)


def opted_out(job_metadata: Mapping[str, Any]) -> bool:
    annotations = job_metadata.get("annotations")
    if not isinstance(annotations, Mapping):
        return False
    return str(annotations.get(PROGRESS_REPORTING_ANNOTATION, "")).strip().lower() == "false"


def add_reporting(spec: dict[str, Any], reporting: Reporting, namespace: str, name: str) -> None:
    """Give the pod spec ``spec`` (a fresh copy, the builder's own) what it needs to
    report."""
    containers = spec.get("containers")
    index = tensorflow_container_index(containers)
    if containers is None or index is None:
        return
    container = dict(containers[index])
    env = list(container.get("env") or [])
    mounts = list(container.get("volumeMounts") or [])
    volumes = list(spec.get("volumes") or [])
    if (
        any(isinstance(e, Mapping) and e.get("name") in ENVS for e in env)
        or any(isinstance(v, Mapping) and v.get("name") == VOLUME for v in volumes)
        or any(isinstance(m, Mapping) and m.get("mountPath") == MOUNT_PATH for m in mounts)
    ):
        return
    container["env"] = [
        *env,
        {"name": URL_ENV, "value": report_url(reporting.base_url, namespace, name)},
        {"name": TOKEN_FILE_ENV, "value": f"{MOUNT_PATH}/{TOKEN_PATH}"},
        {"name": CA_FILE_ENV, "value": f"{MOUNT_PATH}/{CA_KEY}"},
    ]
    container["volumeMounts"] = [
        *mounts,
        {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True},
    ]
    spec["containers"] = [*containers[:index], container, *containers[index + 1 :]]
    spec["volumes"] = [*volumes, _volume(reporting, namespace, name)]


def _volume(reporting: Reporting, namespace: str, name: str) -> dict[str, Any]:
    return {
        "name": VOLUME,
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": audience(namespace, name),
                        "expirationSeconds": reporting.token_seconds,
                        "path": TOKEN_PATH,
                    }
                },
                {
                    "configMap": {
                        "name": CA_CONFIGMAP,
                        "items": [{"key": CA_KEY, "path": CA_KEY}],
                        "optional": True,
                    }
                },
            ]
        },
    }
