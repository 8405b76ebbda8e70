"""What the apiserver enforces at admission: the schema fragments and CEL rules that the
models attach to their fields (hack/gen_crd.py writes them into the CRD).

reconcile.api.validation repeats every rule controller-side, for objects that reached the
cache some other way.
"""

from __future__ import annotations

from typing import Any

from reconcile.api.names import (
    DEFAULT_CONTAINER_NAME,
    DNS1035_LABEL_MAX_LENGTH,
    DNS1035_LABEL_PATTERN,
    MAX_CONTAINER_NAME_LENGTH,
    MAX_CONTAINERS,
    MAX_ENV_VARS,
    MAX_PORTS,
    MAX_TOTAL_REPLICAS,
    ReplicaType,
)

INT32: dict[str, Any] = {"format": "int32"}
INT64: dict[str, Any] = {"format": "int64"}

# CEL helpers: replica-type keys are matched case-insensitively, like upstream
# defaulting re-cases them.
KNOWN_TYPES_CEL = "[" + ", ".join(f"'{t.lower()}'" for t in ReplicaType) + "]"
CHIEF_TYPES_CEL = "['chief', 'master']"


def rule(rule: str, message: str, *, field_path: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"rule": rule, "message": message}
    if field_path is not None:
        out["fieldPath"] = field_path
    return out


# The pod template is schema-less except for what the controller reads and admission
# must check: its containers (list-map keyed by name, as in the Pod API) with name,
# image, ports and env typed as the Pod API types them. Everything else is preserved
# untouched, never pruned (preserve-unknown-fields holds inside each port and env var).
PORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "required": ["containerPort"],
    "properties": {
        "containerPort": {"type": "integer", **INT32, "minimum": 1, "maximum": 65535},
        "name": {"type": "string", "maxLength": 15},
        "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"]},
    },
}
ENV_VAR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "required": ["name"],
    "properties": {"name": {"type": "string", "minLength": 1}, "value": {"type": "string"}},
}
CONTAINER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "required": ["name", "image"],
    "properties": {
        "name": {"type": "string", "maxLength": MAX_CONTAINER_NAME_LENGTH},
        "image": {"type": "string", "minLength": 1},
        "ports": {"type": "array", "maxItems": MAX_PORTS, "items": PORT_SCHEMA},
        "env": {"type": "array", "maxItems": MAX_ENV_VARS, "items": ENV_VAR_SCHEMA},
    },
}
POD_TEMPLATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "required": ["spec"],
    "properties": {
        "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "spec": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "required": ["containers"],
            "properties": {
                "containers": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_CONTAINERS,
                    "items": CONTAINER_SCHEMA,
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "x-kubernetes-validations": [
                        rule(
                            f"self.exists(c, c.name == '{DEFAULT_CONTAINER_NAME}')",
                            "template.spec.containers must have at least one container"
                            f" with name {DEFAULT_CONTAINER_NAME}",
                        )
                    ],
                }
            },
        },
    },
}


# The apiserver prefixes each message with the rule's path (spec.tfReplicaSpecs).
# No messageExpression naming the offending keys: keys have no length bound (a CRD
# cannot declare one), so string building on them blows the CEL cost budget.
REPLICA_SPECS_RULES: list[Any] = [
    rule(
        f"self.all(k, k.lowerAscii() in {KNOWN_TYPES_CEL})",
        "unknown replica type: must be one of Chief, Master, PS, Worker, Evaluator (any case)",
    ),
    rule(
        f"{KNOWN_TYPES_CEL}.all(t, self.filter(k, k.lowerAscii() == t).size() <= 1)",
        "a replica type must not appear twice in different case",
    ),
    rule(
        f"self.filter(k, k.lowerAscii() in {CHIEF_TYPES_CEL}).size() <= 1",
        "must not have more than 1 Chief or Master role",
    ),
    rule(
        f"self.map(k, has(self[k].replicas) ? self[k].replicas : 1).sum() <= {MAX_TOTAL_REPLICAS}",
        f"must not ask for more than {MAX_TOTAL_REPLICAS} replicas in all",
    ),
    rule(
        f"self.all(k, !(k.lowerAscii() in {CHIEF_TYPES_CEL})"
        " || !has(self[k].replicas) || self[k].replicas <= 1)",
        "Chief or Master replicas must be 0 or 1",
    ),
]


# Rules on the whole object: the root is the one place a CRD rule may read
# self.metadata.name (and nothing else of metadata).
_R = "self.spec.tfReplicaSpecs[k].replicas"
#: Digits of the highest index (replicas - 1), replicas being at most MAX_TOTAL_REPLICAS.
_INDEX_DIGITS = f"(!has({_R}) || {_R} <= 10 ? 1 : {_R} <= 100 ? 2 : {_R} <= 1000 ? 3 : 4)"
ROOT_RULES: list[Any] = [
    rule(
        f"self.metadata.name.size() <= {DNS1035_LABEL_MAX_LENGTH}"
        f" && self.metadata.name.matches('{DNS1035_LABEL_PATTERN}')",
        "metadata.name must be a DNS-1035 label: lower case alphanumerics or"
        " '-', starting with a letter, ending with an alphanumeric, at most"
        f" {DNS1035_LABEL_MAX_LENGTH} characters",
        field_path=".metadata.name",
    ),
    rule(
        "!has(self.spec.tfReplicaSpecs) || self.spec.tfReplicaSpecs.all(k,"
        f" self.metadata.name.size() + k.size() + 2 + {_INDEX_DIGITS}"
        f" <= {DNS1035_LABEL_MAX_LENGTH})",
        "metadata.name is too long for its replicas: every pod and service is named"
        " <metadata.name>-<replica type>-<index>, a DNS-1035 label of at most"
        f" {DNS1035_LABEL_MAX_LENGTH} characters",
        field_path=".metadata.name",
    ),
]
