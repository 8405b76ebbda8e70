"""A cluster tenant: a user whom RBAC lets touch pods and services in its own namespace
only, as a hostile team on a shared cluster would be.

The test's admin credential acts as the tenant by impersonation (``Impersonate-User``),
so every request is authorized by the apiserver exactly as the tenant's own would be: a
request outside its namespace is refused with a 403, which ``Tenant.req`` raises.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.cluster.kube import ApiFailure, wait_for
from tests.conftest import Cluster

#: What the tenant may do in its namespace: what a team running its own workloads has.
TENANT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["pods", "services"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    }
]


class Tenant:
    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.api = cluster.api
        self.namespace = namespace
        self.user = f"tenant-{uuid.uuid4().hex[:8]}"
        self._grant()

    def _admin(self, method: str, path: str, body: Any) -> None:
        status, out = self.api.request(method, path, body)
        if status >= 300:
            raise ApiFailure(status, out)

    def _grant(self) -> None:
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{self.namespace}"
        self._admin(
            "POST",
            f"{rbac}/roles",
            {"metadata": {"name": "tenant"}, "rules": TENANT_RULES},
        )
        self._admin(
            "POST",
            f"{rbac}/rolebindings",
            {
                "metadata": {"name": "tenant"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": self.user}
                ],
            },
        )
        # The apiserver authorizes from its own cache of RBAC objects, which sees a new
        # binding a moment after it is stored: the tenant's first request could be
        # refused for that alone. Wait until the apiserver says every grant holds.
        wanted = [
            (resource, verb)
            for rule in TENANT_RULES
            for resource in rule["resources"]
            for verb in rule["verbs"]
        ]
        wait_for(lambda: all(self._allowed(r, v) for r, v in wanted), 30, "the tenant's grants")

    def _allowed(self, resource: str, verb: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": self.namespace,
                    "verb": verb,
                    "resource": resource,
                }
            },
        }
        status, out = self.api.request(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            review,
            headers={"Impersonate-User": self.user},
        )
        if status >= 300:
            raise ApiFailure(status, out)
        return bool((out.get("status") or {}).get("allowed"))

    def req(
        self, method: str, path: str, body: Any = None, ctype: str = "application/json"
    ) -> Any:
        status, out = self.api.request(
            method, path, body, content_type=ctype, headers={"Impersonate-User": self.user}
        )
        if status >= 300:
            raise ApiFailure(status, out)
        return out

    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def services(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/services"

    def merge(self, path: str, patch: dict[str, Any]) -> Any:
        return self.req("PATCH", path, patch, "application/merge-patch+json")
