"""Hypothesis strategies for TFJobs a careless or hostile user might submit.

``tfjobs()`` draws whole TFJob objects, valid and invalid in every way the API lets a
user be: replica maps (known types in any case, unknown and case-duplicate keys),
replica counts around every limit, names near the 63-character limits (and unicode,
upper case, digits first), policies valid and not, and container fields of the wrong
shape. The draws are plain JSON, as a client would send them.

``broken_jobs()`` draws what the tests can check an outcome against: a valid job, or one
broken on purpose, each change recorded as a ``Break`` (the field, and whether the CRD
or only the Pod API refuses it). The record is the generator's own, never the
controller's validation: a test compares the controller with it.
"""

from __future__ import annotations

import copy
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from reconcile.api.names import MAX_TOTAL_REPLICAS

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


@st.composite
def tfjobs(
    draw: st.DrawFn,
    counts: st.SearchStrategy[int | None] = replica_counts,
    *,
    plausible: bool = False,
) -> dict[str, Any]:
    """A TFJob of any shape; ``plausible``: a valid one, or one broken on purpose in a
    field or two (``broken_jobs``, whose record this drops)."""
    if plausible:
        return draw(broken_jobs()).job
    specs = draw(st.dictionaries(replica_keys, replica_specs(counts), min_size=0, max_size=4))
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
            "name": draw(names),
            "namespace": "ns",
            "uid": "uid-1",
            "generation": 1,
        },
        "spec": spec,
    }


# --- Valid jobs, then broken on purpose, each break recorded ------------------------------

#: What the pods' names add to a job's: "-evaluator-" and one digit (small jobs).
_LONGEST_SUFFIX = len("-evaluator-0")
_NAME_MAX = 63 - _LONGEST_SUFFIX


@dataclass(frozen=True)
class Break:
    """One field a generator made invalid on purpose.

    ``path`` is the field as Kubernetes names it in an error, map keys written ``.Key``
    (``dotted``): the TFJob's field when ``where`` is ``"admission"`` (the CRD refuses
    the job), the Pod's when it is ``"pod"`` (the CRD takes the job, the Pod API refuses
    every pod built from the template). ``controller`` says whether the controller's own
    validation (a job that reached it without our CRD) must name the field too."""

    path: str
    where: str
    controller: bool = True


@dataclass(frozen=True)
class BrokenJob:
    """A TFJob and what its generator made invalid: nothing, for a valid job."""

    job: dict[str, Any]
    breaks: tuple[Break, ...]

    @property
    def refused(self) -> tuple[Break, ...]:
        return tuple(b for b in self.breaks if b.where == "admission")

    @property
    def pod_refused(self) -> tuple[Break, ...]:
        return tuple(b for b in self.breaks if b.where == "pod")


def dotted(text: str) -> str:
    """Field paths as the schema's errors spell them: ``[Worker]`` becomes ``.Worker``
    (CEL and the controller write map keys in brackets); list indexes stay."""
    return re.sub(r"\[([A-Za-z][\w-]*)\]", r".\1", text)


def succeeds_at_once(spec: dict[str, Any]) -> bool:
    """Upstream's success rule, for a valid job's spec: with no Chief or Master pod to
    decide (one of 0 replicas counts as absent, as here since issue 10), the job succeeds
    when its workers have, and a Worker of 0 replicas has at once, before any pod."""
    specs = spec["tfReplicaSpecs"]
    chiefs = sum(s.get("replicas", 1) for k, s in specs.items() if k.lower() in CHIEFS)
    workers = [s.get("replicas", 1) for k, s in specs.items() if k.lower() == "worker"]
    return chiefs == 0 and workers == [0]


def pods_asked(name: str, spec: dict[str, Any]) -> set[str]:
    """The pods a valid job's raw spec asks for: replicas (default 1) of each type."""
    return {
        f"{name}-{rtype.lower()}-{i}"
        for rtype, rspec in spec["tfReplicaSpecs"].items()
        for i in range(rspec.get("replicas", 1))
    }


CHIEFS = ("chief", "master")


def _tensorflow(draw: st.DrawFn) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "tensorflow", "image": "tf:latest"}
    if draw(st.booleans()):
        c["ports"] = [{"name": "tfjob-port", "containerPort": draw(st.sampled_from([2222, 3333]))}]
    if draw(st.integers(0, 3)) == 0:
        c["env"] = [{"name": "MODE", "value": draw(st.text(string.ascii_letters, max_size=5))}]
    return c


@st.composite
def _valid_job(draw: st.DrawFn) -> dict[str, Any]:
    """A TFJob every rule accepts: known replica types (any case, one Chief or Master at
    most), a few pods, a tensorflow container, valid policies. Its pods fit a name of at
    most ``_NAME_MAX`` characters."""
    chief = draw(st.sampled_from([None, "Chief", "Master"]))
    others = draw(st.lists(st.sampled_from(["PS", "Worker", "Evaluator"]), unique=True, max_size=3))
    types = ([chief] if chief else []) + others
    if not types:
        types = ["Worker"]
    specs: dict[str, Any] = {}
    for rtype in types:
        key = draw(st.sampled_from([rtype, rtype, rtype.lower()]))
        chiefly = rtype.lower() in CHIEFS
        counts = [None, 1] if chiefly else [None, 1, 1, 2, 3]
        spec: dict[str, Any] = {}
        count = draw(st.sampled_from([*counts, 0] if draw(st.integers(0, 9)) == 0 else counts))
        if count is not None:
            spec["replicas"] = count
        policy = draw(st.sampled_from([None, "Never", "OnFailure", "Always", "ExitCode", ""]))
        if policy is not None:
            spec["restartPolicy"] = policy
        containers = [_tensorflow(draw)]
        if draw(st.integers(0, 3)) == 0:
            side = {"name": "sidecar", "image": "busybox"}
            containers.insert(draw(st.integers(0, 1)), side)
        template_spec: dict[str, Any] = {"containers": containers}
        if draw(st.integers(0, 5)) == 0:
            template_spec["restartPolicy"] = "Always"  # overridden, with a Warning
        template: dict[str, Any] = {"spec": template_spec}
        if draw(st.integers(0, 3)) == 0:
            template["metadata"] = {"labels": {"team": "fuzz"}}
        spec["template"] = template
        specs[key] = spec
    run_policy: dict[str, Any] = {}
    for field, strategy in (
        ("cleanPodPolicy", st.sampled_from(["None", "Running", "All"])),
        ("backoffLimit", st.integers(0, 5)),
        # a deadline that passes while the test watches fails the job (counted apart)
        ("activeDeadlineSeconds", st.sampled_from([1, 2, 600, 3600])),
        ("ttlSecondsAfterFinished", st.integers(300, 600)),
        ("suspend", st.booleans()),
    ):
        if draw(st.integers(0, 3)) == 0:
            run_policy[field] = draw(strategy)
    spec = {"tfReplicaSpecs": specs, "runPolicy": run_policy}
    if draw(st.integers(0, 4)) == 0:
        spec["successPolicy"] = draw(st.sampled_from(["", "AllWorkers"]))
    name = draw(st.from_regex(rf"[a-z][a-z0-9-]{{0,{_NAME_MAX - 2}}}[a-z0-9]", fullmatch=True))
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": "ns", "uid": "uid-1", "generation": 1},
        "spec": spec,
    }


# Each breaker changes one field of a valid job and says which: (draw, job) -> Break.
Breaker = Callable[[st.DrawFn, dict[str, Any]], Break]


def _specs(job: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = job["spec"]["tfReplicaSpecs"]
    return out


def _a_replica(draw: st.DrawFn, job: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """A replica type of the job: its key, its spec, and its path as the schema writes it."""
    key = draw(st.sampled_from(sorted(_specs(job))))
    return key, _specs(job)[key], f"spec.tfReplicaSpecs.{key}"


def _a_pod_replica(draw: st.DrawFn, job: dict[str, Any]) -> dict[str, Any]:
    """A replica type of the job that asks for pods (one is given a pod if none does)."""
    some = sorted(k for k, s in _specs(job).items() if s.get("replicas", 1) > 0)
    key = draw(st.sampled_from(some or sorted(_specs(job))))
    spec: dict[str, Any] = _specs(job)[key]
    if not some:
        spec["replicas"] = 1
    return spec


def _the_tensorflow(spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    containers = spec["template"]["spec"]["containers"]
    i = next(i for i, c in enumerate(containers) if c.get("name") == "tensorflow")
    return i, containers[i]


def _bad_name(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    bad = draw(st.sampled_from(["1job", "Job", "job.x", "job_x", "-job", "job-", "a" * 64]))
    job["metadata"]["name"] = bad
    return Break("metadata.name", "admission")


def _name_too_long_for_its_pods(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    key = max(_specs(job), key=len)
    count = _specs(job)[key].get("replicas", 1)
    # <name>-<type>-<highest index>: one character over 63 (a chief's index is 0)
    digits = len(str(max(count - 1, 0)))
    job["metadata"]["name"] = "a" * (63 - len(key) - 2 - digits + 1)
    return Break("metadata.name", "admission")


def _unknown_type(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    key = draw(st.sampled_from(["Launcher", "launcher", "Trainer", "Workers"]))
    _specs(job)[key] = copy.deepcopy(next(iter(_specs(job).values())))
    return Break("spec.tfReplicaSpecs", "admission")


def _type_twice(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    key, spec, _ = _a_replica(draw, job)
    other = key.lower() if key != key.lower() else key.upper()
    _specs(job)[other] = copy.deepcopy(spec)
    return Break("spec.tfReplicaSpecs", "admission")


def _two_chiefs(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    template = next(iter(_specs(job).values()))["template"]
    for key in ("Chief", "Master"):
        if not any(k.lower() == key.lower() for k in _specs(job)):
            _specs(job)[key] = {"replicas": 1, "template": copy.deepcopy(template)}
    return Break("spec.tfReplicaSpecs", "admission")


def _chief_of_two(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    chiefs = [k for k in _specs(job) if k.lower() in CHIEFS]
    if chiefs:
        _specs(job)[chiefs[0]]["replicas"] = 2
    else:
        template = copy.deepcopy(next(iter(_specs(job).values()))["template"])
        _specs(job)[draw(st.sampled_from(["Chief", "Master"]))] = {
            "replicas": 2,
            "template": template,
        }
    return Break("spec.tfReplicaSpecs", "admission")


def _negative_replicas(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    spec["replicas"] = draw(st.sampled_from([-1, -5]))
    return Break(f"{path}.replicas", "admission")


def _too_many_replicas(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    plain = [k for k in _specs(job) if k.lower() not in CHIEFS]
    key = draw(st.sampled_from(plain)) if plain else "Worker"
    if key not in _specs(job):
        _specs(job)[key] = copy.deepcopy(next(iter(_specs(job).values())))
    _specs(job)[key]["replicas"] = MAX_TOTAL_REPLICAS + 1
    return Break("spec.tfReplicaSpecs", "admission")


def _bad_restart_policy(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    spec["restartPolicy"] = draw(st.sampled_from(["Sometimes", "never", "exitcode"]))
    return Break(f"{path}.restartPolicy", "admission")


def _no_template(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    if draw(st.booleans()):
        del spec["template"]
        return Break(f"{path}.template", "admission")
    spec["template"] = {"metadata": {"labels": {"a": "b"}}}
    return Break(f"{path}.template.spec", "admission")


def _no_containers(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    spec["template"]["spec"]["containers"] = []
    return Break(f"{path}.template.spec.containers", "admission")


def _no_tensorflow_container(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    _, tf = _the_tensorflow(spec)
    tf["name"] = draw(st.sampled_from(["trainer", "tf", "Tensorflow"]))
    return Break(f"{path}.template.spec.containers", "admission")


def _no_image(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    i, tf = _the_tensorflow(spec)
    if draw(st.booleans()):
        del tf["image"]
    else:
        tf["image"] = ""
    return Break(f"{path}.template.spec.containers[{i}].image", "admission")


def _container_twice(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    containers = spec["template"]["spec"]["containers"]
    containers.append({"name": containers[0]["name"], "image": "other"})
    return Break(f"{path}.template.spec.containers[{len(containers) - 1}]", "admission")


def _long_container_name(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    containers = spec["template"]["spec"]["containers"]
    containers.append({"name": "x" * 64, "image": "busybox"})
    return Break(f"{path}.template.spec.containers[{len(containers) - 1}].name", "admission")


def _bad_port(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    """A port the CRD's schema refuses; the controller checks only containerPort's type."""
    _, spec, path = _a_replica(draw, job)
    i, tf = _the_tensorflow(spec)
    cpath = f"{path}.template.spec.containers[{i}]"
    port: dict[str, Any] = {"name": "extra", "containerPort": 4444}
    field, value, controller = draw(
        st.sampled_from(
            [
                ("containerPort", "x", True),
                ("containerPort", 0, False),
                ("containerPort", 70000, False),
                ("name", "a-port-name-too-long", False),
                ("protocol", "tcp", False),
            ]
        )
    )
    port[field] = value
    if draw(st.booleans()) or field != "containerPort" or not controller:
        tf["ports"] = [*(tf.get("ports") or []), port]
        return Break(f"{cpath}.ports[{len(tf['ports']) - 1}].{field}", "admission", controller)
    tf["ports"] = draw(st.sampled_from([5, "2222", {"containerPort": 2222}]))
    return Break(f"{cpath}.ports", "admission")


def _bad_env(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    _, spec, path = _a_replica(draw, job)
    i, tf = _the_tensorflow(spec)
    cpath = f"{path}.template.spec.containers[{i}]"
    if draw(st.booleans()):
        tf["env"] = draw(st.sampled_from([5, "A=b", {"name": "A"}]))
        return Break(f"{cpath}.env", "admission")
    tf["env"] = [*(tf.get("env") or []), {"value": "v"}]
    return Break(f"{cpath}.env[{len(tf['env']) - 1}].name", "admission")


def _bad_managed_by(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    job["spec"]["runPolicy"]["managedBy"] = draw(st.sampled_from(["someone/else", ""]))
    return Break("spec.runPolicy.managedBy", "admission")


def _bad_run_policy_type(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    field, value = draw(
        st.sampled_from([("backoffLimit", "3"), ("suspend", "yes"), ("activeDeadlineSeconds", 1.5)])
    )
    job["spec"]["runPolicy"][field] = value
    return Break(f"spec.runPolicy.{field}", "admission")


# What the CRD takes (its template is open) and the Pod API refuses.


def _bad_sidecar_name(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    spec = _a_pod_replica(draw, job)
    containers = spec["template"]["spec"]["containers"]
    taken = {c.get("name") for c in containers}
    names = [n for n in ("Sidecar", "side_car", "-x", "Side-2") if n not in taken]
    containers.append({"name": draw(st.sampled_from(names)), "image": "b"})
    return Break(f"spec.containers[{len(containers) - 1}].name", "pod")


def _bad_port_name(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    spec = _a_pod_replica(draw, job)
    i, tf = _the_tensorflow(spec)
    # a valid DNS label (so the Service takes it) but no IANA service name
    tf["ports"] = [{"name": draw(st.sampled_from(["1234", "a--b"])), "containerPort": 5555}]
    return Break(f"spec.containers[{i}].ports[0].name", "pod")


def _spaced_image(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    spec = _a_pod_replica(draw, job)
    i, tf = _the_tensorflow(spec)
    tf["image"] = draw(st.sampled_from(["tf:latest ", " tf:latest"]))
    return Break(f"spec.containers[{i}].image", "pod")


def _bad_env_name(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    spec = _a_pod_replica(draw, job)
    i, tf = _the_tensorflow(spec)
    tf["env"] = [*(tf.get("env") or []), {"name": "A=B", "value": "v"}]
    return Break(f"spec.containers[{i}].env[{len(tf['env']) - 1}].name", "pod")


def _bad_pod_deadline(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    spec = _a_pod_replica(draw, job)
    spec["template"]["spec"]["activeDeadlineSeconds"] = draw(st.sampled_from([0, -1]))
    return Break("spec.activeDeadlineSeconds", "pod")


def _bad_pod_label(draw: st.DrawFn, job: dict[str, Any]) -> Break:
    spec = _a_pod_replica(draw, job)
    spec["template"]["metadata"] = {"labels": {"bad key": "x"}}
    return Break("metadata.labels", "pod")


ADMISSION_BREAKERS: tuple[Breaker, ...] = (
    _bad_name,
    _name_too_long_for_its_pods,
    _unknown_type,
    _type_twice,
    _two_chiefs,
    _chief_of_two,
    _negative_replicas,
    _too_many_replicas,
    _bad_restart_policy,
    _no_template,
    _no_containers,
    _no_tensorflow_container,
    _no_image,
    _container_twice,
    _long_container_name,
    _bad_port,
    _bad_env,
    _bad_managed_by,
    _bad_run_policy_type,
)
POD_BREAKERS: tuple[Breaker, ...] = (
    _bad_sidecar_name,
    _bad_port_name,
    _spaced_image,
    _bad_env_name,
    _bad_pod_deadline,
    _bad_pod_label,
)


@st.composite
def broken_jobs(draw: st.DrawFn) -> BrokenJob:
    """A valid job (six in ten), or one broken on purpose in one or two fields, each break
    recorded: mostly fields the CRD refuses, sometimes ones only the Pod API refuses."""
    kind = draw(st.sampled_from(["valid"] * 6 + ["admission"] * 2 + ["pod"] * 2))
    job = draw(_valid_job())
    breaks: list[Break] = []
    if kind != "valid":
        breakers = ADMISSION_BREAKERS if kind == "admission" else POD_BREAKERS
        breaks.append(draw(st.sampled_from(breakers))(draw, job))
        if draw(st.sampled_from([False, False, True])):  # a second, where the first left its field
            again = copy.deepcopy(job)
            try:
                second = draw(st.sampled_from(breakers))(draw, again)
            except (KeyError, IndexError, TypeError, StopIteration, AttributeError):
                pass  # the first break took away what this one would change
            else:
                job, breaks = again, [*breaks, second]
    return BrokenJob(job, tuple(breaks))
