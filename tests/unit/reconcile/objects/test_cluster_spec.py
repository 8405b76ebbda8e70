"""TF_CONFIG: exact byte-for-byte strings, as upstream's json.Marshal produces them, but
for what TensorFlow refuses of upstream's (the evaluator in the cluster, ``"ps":null``)."""

from __future__ import annotations

import json

import pytest

from reconcile.objects.cluster_spec import (
    ClusterMember,
    cluster_layout,
    go_json,
    is_distributed,
    tf_port,
)
from tests.builders import container

M = ClusterMember

# Upstream tf/pod_test.go (job "J" in namespace "ns3", one evaluator, ps and worker), and
# ours: the same bytes without the evaluator, which joins no cluster.
UPSTREAM_POD_TEST = (
    '{"cluster":{"evaluator":["J-evaluator-0.ns3.svc:2222"],"ps":["J-ps-0.ns3.svc:2222"],'
    '"worker":["J-worker-0.ns3.svc:2222"]},"task":{"type":"worker","index":0},'
    '"environment":"cloud"}'
)
UPSTREAM_POD_TEST_DOMAIN = (
    '{"cluster":{"evaluator":["J-evaluator-0.ns3.svc.tf.training.com:2222"],'
    '"ps":["J-ps-0.ns3.svc.tf.training.com:2222"],'
    '"worker":["J-worker-0.ns3.svc.tf.training.com:2222"]},'
    '"task":{"type":"worker","index":0},"environment":"cloud"}'
)
# docs/semantics.md#tf_config: mnist-worker-1.
MNIST_WORKER_1 = (
    '{"cluster":{"chief":["mnist-chief-0.kubeflow.svc:2222"],'
    '"ps":["mnist-ps-0.kubeflow.svc:2222"],'
    '"worker":["mnist-worker-0.kubeflow.svc:2222","mnist-worker-1.kubeflow.svc:2222"]},'
    '"task":{"type":"worker","index":1},"environment":"cloud"}'
)
OURS_POD_TEST = UPSTREAM_POD_TEST.replace('"evaluator":["J-evaluator-0.ns3.svc:2222"],', "")
OURS_POD_TEST_DOMAIN = UPSTREAM_POD_TEST_DOMAIN.replace(
    '"evaluator":["J-evaluator-0.ns3.svc.tf.training.com:2222"],', ""
)
EPW = {"Evaluator": M(1), "PS": M(1), "Worker": M(1)}
MNIST = {"Chief": M(1), "PS": M(1), "Worker": M(2)}


@pytest.mark.parametrize(
    ("job", "ns", "members", "rtype", "index", "domain", "dynamic", "want"),
    [
        pytest.param("J", "ns3", EPW, "Worker", 0, None, False, OURS_POD_TEST, id="upstream"),
        pytest.param(
            "J", "ns3", EPW, "Worker", 0, "tf.training.com", False, OURS_POD_TEST_DOMAIN,
            id="upstream-custom-domain",
        ),
        # the evaluator itself: the training cluster and its own task
        pytest.param(
            "J", "ns3", EPW, "Evaluator", 0, None, False,
            '{"cluster":{"ps":["J-ps-0.ns3.svc:2222"],"worker":["J-worker-0.ns3.svc:2222"]},'
            '"task":{"type":"evaluator","index":0},"environment":"cloud"}',
            id="evaluator-own",
        ),
        pytest.param(
            "j", "n", {"Evaluator": M(2), "Worker": M(1)}, "Evaluator", 1, None, False,
            '{"cluster":{"worker":["j-worker-0.n.svc:2222"]},'
            '"task":{"type":"evaluator","index":1},"environment":"cloud"}',
            id="second-evaluator",
        ),
        pytest.param("mnist", "kubeflow", MNIST, "Worker", 1, None, False, MNIST_WORKER_1, id="semantics-10"),
        pytest.param(
            "j", "n", {"Worker": M(2, 9999)}, "Worker", 1, None, False,
            '{"cluster":{"worker":["j-worker-0.n.svc:9999","j-worker-1.n.svc:9999"]},'
            '"task":{"type":"worker","index":1},"environment":"cloud"}',
            id="custom-port",
        ),
        pytest.param(
            "j", "n", {"Worker": M(1), "PS": M(1, 3000)}, "PS", 0, None, False,
            '{"cluster":{"ps":["j-ps-0.n.svc:3000"],"worker":["j-worker-0.n.svc:2222"]},'
            '"task":{"type":"ps","index":0},"environment":"cloud"}',
            id="per-type-port-and-sorted-keys",
        ),
        pytest.param(
            "j", "n", {"Master": M(1), "Worker": M(1)}, "Master", 0, None, False,
            '{"cluster":{"master":["j-master-0.n.svc:2222"],"worker":["j-worker-0.n.svc:2222"]},'
            '"task":{"type":"master","index":0},"environment":"cloud"}',
            id="master-key",
        ),
        pytest.param("j", "n", {"Worker": M(1)}, "Worker", 0, None, False, None, id="single-worker"),
        pytest.param("j", "n", {"Chief": M(1)}, "Chief", 0, None, False, None, id="single-chief"),
        pytest.param(
            "j", "n", {"Chief": M(1), "Worker": M(0)}, "Chief", 0, None, False, None,
            id="one-pod-in-total",
        ),
        # enableDynamicWorker: upstream's sparse form for workers and PS.
        pytest.param(
            "j", "n", {"Chief": M(1), "PS": M(2), "Worker": M(3)}, "Worker", 2, None, True,
            '{"cluster":{"worker":{"2":"j-worker-2.n.svc:2222"},'
            '"ps":["j-ps-0.n.svc:2222","j-ps-1.n.svc:2222"]},"task":{"type":"worker","index":2}}',
            id="sparse-worker",
        ),
        pytest.param(
            "j", "n", {"Worker": M(2)}, "Worker", 0, None, True,
            '{"cluster":{"worker":{"0":"j-worker-0.n.svc:2222"},"ps":[]},'
            '"task":{"type":"worker","index":0}}',
            id="sparse-worker-no-ps-is-empty-not-null",
        ),
        pytest.param(
            "j", "n", {"PS": M(2), "Worker": M(2)}, "PS", 1, None, True,
            '{"cluster":{"worker":{},"ps":["j-ps-1.n.svc:2222"]},"task":{"type":"ps","index":1}}',
            id="sparse-ps",
        ),
        pytest.param(
            "j", "n", {"Evaluator": M(1), "Worker": M(2)}, "Evaluator", 0, None, True,
            '{"cluster":{"worker":{},"ps":[]},"task":{"type":"evaluator","index":0}}',
            id="sparse-evaluator-as-upstream",
        ),
        # Deliberate fix (#1763): the chief of a dynamic-worker job gets the full cluster.
        pytest.param(
            "j", "n", {"Chief": M(1), "PS": M(1), "Worker": M(2)}, "Chief", 0, None, True,
            '{"cluster":{"chief":["j-chief-0.n.svc:2222"],"ps":["j-ps-0.n.svc:2222"],'
            '"worker":["j-worker-0.n.svc:2222","j-worker-1.n.svc:2222"]},'
            '"task":{"type":"chief","index":0},"environment":"cloud"}',
            id="dynamic-chief-gets-dense-cluster",
        ),
    ],
)  # fmt: skip
def test_tf_config_exact(
    job: str,
    ns: str,
    members: dict[str, ClusterMember],
    rtype: str,
    index: int,
    domain: str | None,
    dynamic: bool,
    want: str | None,
) -> None:
    layout = cluster_layout(job, ns, members, cluster_domain=domain, dynamic_worker=dynamic)
    got = layout.tf_config(rtype, index)
    assert got == want
    if want is not None:
        json.loads(got or "")  # and it is valid JSON


@pytest.mark.parametrize(
    ("members", "want"),
    [
        pytest.param({"Worker": M(1)}, False, id="one"),
        pytest.param({"Worker": M(2)}, True, id="two-workers"),
        pytest.param({"Chief": M(1), "Worker": M(1)}, True, id="chief-and-worker"),
        pytest.param({"Worker": M(0)}, True, id="zero-counts-as-distributed"),
        pytest.param({"Worker": M(1), "Custom": M(3)}, False, id="unknown-types-not-counted"),
    ],
)
def test_is_distributed(members: dict[str, ClusterMember], want: bool) -> None:
    assert is_distributed(members) is want


def test_cluster_spec_includes_unknown_types_sorted() -> None:
    spec = cluster_layout("j", "n", {"Worker": M(2), "Custom": M(1)}).cluster
    assert list(spec) == ["custom", "worker"]


@pytest.mark.parametrize(
    ("template", "want"),
    [
        pytest.param({"spec": {"containers": [container()]}}, 2222, id="no-ports"),
        pytest.param(
            {
                "spec": {
                    "containers": [container(ports=[{"name": "tfjob-port", "containerPort": 1}])]
                }
            },
            1,
            id="tfjob-port",
        ),
        pytest.param(
            {"spec": {"containers": [container(ports=[{"name": "other", "containerPort": 1}])]}},
            2222,
            id="other-port-ignored",
        ),
        pytest.param(
            {
                "spec": {
                    "containers": [
                        container("sidecar", ports=[{"name": "tfjob-port", "containerPort": 7}]),
                        container(),
                    ]
                }
            },
            2222,
            id="only-the-tensorflow-container-counts",
        ),
    ],
)
def test_tf_port(template: dict[str, object], want: int) -> None:
    assert tf_port(template) == want


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param({"a": "<&>"}, '{"a":"\\u003c\\u0026\\u003e"}', id="html-escaped"),
        pytest.param({"a": "é"}, '{"a":"é"}', id="utf8-kept"),
        pytest.param({"a": [1, None]}, '{"a":[1,null]}', id="compact"),
        pytest.param({"a": "\x01\n\u2028"}, '{"a":"\\u0001\\n\\u2028"}', id="control-escaped"),
        pytest.param({"a": "\ud800"}, '{"a":"\ud800"}', id="lone-surrogate-kept"),
        pytest.param({"a": 2**70}, '{"a":1180591620717411303424}', id="big-int"),
    ],
)
def test_go_json(value: object, want: str) -> None:
    assert go_json(value) == want
