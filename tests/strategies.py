"""Hypothesis strategies for TFJobs a careless or hostile user might submit.

``tfjobs()`` draws whole TFJob objects, valid and invalid in every way the API lets a
user be: replica maps (known types in any case, unknown and case-duplicate keys),
replica counts around every limit, names near the 63-character limits (and unicode,
upper case, digits first), policies valid and not, and container fields of the wrong
shape. The draws are plain JSON, as a client would send them.
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

from reconcile.names import MAX_TOTAL_REPLICAS

KNOWN_TYPES = ["Chief", "Master", "PS", "Worker", "Evaluator"]
ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=5), st.just([]), st.just({})
)


def often(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` nine times in ten, else ``odd``: mostly plausible, sometimes not."""
    return st.integers(0, 9).flatmap(lambda n: odd if n == 0 else usual)


def _case(word: str) -> st.SearchStrategy[str]:
    return st.sampled_from([word, word.lower(), word.upper()])


replica_keys = st.one_of(
    st.sampled_from(KNOWN_TYPES).flatmap(_case), st.text(min_size=1, max_size=8)
)

# Around every boundary: none, one, the per-chief limit, the total limit.
replica_counts = st.one_of(
    st.sampled_from([None, -1, 0, 1, 2, 3]),
    st.integers(0, 12),
    st.sampled_from([MAX_TOTAL_REPLICAS - 1, MAX_TOTAL_REPLICAS, MAX_TOTAL_REPLICAS + 1]),
)

_dns = string.ascii_lowercase + string.digits + "-"
names = st.one_of(
    st.integers(1, 70).flatmap(
        lambda n: st.text(alphabet=_dns, min_size=n, max_size=n).map(lambda s: "a" + s[1:])
    ),
    st.sampled_from(["job", "a" * 54, "a" * 55, "a" * 63, "a" * 64, "1job", "Job", "job.x"]),
    st.text(min_size=1, max_size=10),  # unicode, spaces, anything
)

ports = st.one_of(
    st.none(),
    st.just([{"name": "tfjob-port", "containerPort": 2222}]),
    st.just([{"name": "tfjob-port", "containerPort": 2222}]),
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "name": st.one_of(st.just("tfjob-port"), st.text(max_size=20), ODD_VALUES),
                "containerPort": st.one_of(st.integers(-1, 70000), ODD_VALUES),
                "protocol": st.one_of(st.sampled_from(["TCP", "UDP", "tcp"]), ODD_VALUES),
            },
        ),
        max_size=3,
    ),
    ODD_VALUES,
)
env = st.one_of(
    st.none(),
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "name": st.one_of(st.text(min_size=1, max_size=10), ODD_VALUES),
                "value": st.one_of(st.text(max_size=10), ODD_VALUES),
            },
        ),
        max_size=3,
    ),
    ODD_VALUES,
)


@st.composite
def containers(draw: st.DrawFn) -> Any:
    def container(name: str) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name}
        image = draw(often(st.just("tf:latest"), st.one_of(st.just(""), st.none(), ODD_VALUES)))
        if image is not None:
            c["image"] = image
        for field, strategy in (("ports", ports), ("env", env)):
            value = draw(strategy)
            if value is not None:
                c[field] = value
        return c

    first = draw(st.sampled_from(["tensorflow", "tensorflow", "trainer"]))
    out = [container(first)]
    if draw(st.booleans()):
        out.append(container(draw(st.sampled_from(["sidecar", "tensorflow", "x" * 64]))))
    return draw(often(st.just(out), st.one_of(st.just([]), ODD_VALUES)))


# For a real cluster: small jobs, and the one count past the limit (refused, so cheap).
small_replica_counts = st.one_of(
    st.sampled_from([None, -1, 0, 1, 2, 3]), st.just(MAX_TOTAL_REPLICAS + 1)
)


@st.composite
def replica_specs(
    draw: st.DrawFn, counts: st.SearchStrategy[int | None] = replica_counts
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    count = draw(counts)
    if count is not None:
        spec["replicas"] = count
    policy = draw(
        st.one_of(
            st.sampled_from(["Never", "OnFailure", "Always", "ExitCode", ""]),
            st.none(),
            st.text(max_size=6),
        )
    )
    if policy is not None:
        spec["restartPolicy"] = policy
    template_spec: dict[str, Any] = {"containers": draw(containers())}
    if draw(st.integers(0, 5)) == 0:
        template_spec["restartPolicy"] = "Always"
    spec["template"] = draw(
        often(st.just({"spec": template_spec}), st.one_of(st.just({}), ODD_VALUES))
    )
    return spec


#: Mostly plausible names and keys: so that most jobs get past admission and reach the
#: controller, while every kind of mistake still turns up.
plausible_names = often(st.from_regex(r"[a-z][a-z0-9-]{0,45}[a-z0-9]", fullmatch=True), names)
plausible_keys = often(st.sampled_from(KNOWN_TYPES), replica_keys)


@st.composite
def tfjobs(
    draw: st.DrawFn,
    counts: st.SearchStrategy[int | None] = replica_counts,
    *,
    plausible: bool = False,
) -> dict[str, Any]:
    keys = plausible_keys if plausible else replica_keys
    specs = draw(st.dictionaries(keys, replica_specs(counts), min_size=0, max_size=4))
    run_policy: dict[str, Any] = {}
    for key, strategy in (
        ("cleanPodPolicy", st.sampled_from(["None", "Running", "All", "Sometimes"])),
        ("backoffLimit", st.integers(-1, 5)),
        ("activeDeadlineSeconds", st.integers(-1, 600)),
        ("ttlSecondsAfterFinished", st.integers(-1, 600)),
        ("suspend", st.booleans()),
    ):
        if draw(st.integers(0, 3)) == 0:
            run_policy[key] = draw(strategy)
    spec: dict[str, Any] = {"tfReplicaSpecs": specs, "runPolicy": run_policy}
    if draw(st.integers(0, 4)) == 0:
        spec["successPolicy"] = draw(st.sampled_from(["", "AllWorkers", "Some"]))
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {
            "name": draw(plausible_names if plausible else names),
            "namespace": "ns",
            "uid": "uid-1",
            "generation": 1,
        },
        "spec": spec,
    }
