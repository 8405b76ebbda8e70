"""What TensorFlow makes of a TF_CONFIG: this task's own, and upstream's variants of it.

Prints progress lines (common.progress) and exits 0 whatever it finds, so a test reads
TensorFlow's verdicts from the log:

- event "own": this task's TF_CONFIG through TFConfigClusterResolver and what the task
  does with it (--use): "strategy", the cluster validation every tf.distribute strategy
  runs (multi_worker_util); "server", a tf.distribute.Server for the task, as a
  ParameterServerStrategy worker or ps starts (the only use of the sparse form of a
  dynamic-worker job: its workers each see themselves alone). The job names it holds,
  and the error, if TensorFlow refused it;
- event "variant", one per variant of this task's TF_CONFIG as upstream writes it
  (--variants): its name and TensorFlow's error, or none.

The variants: "evaluators" puts --evaluators evaluator addresses into the cluster (as
upstream does for every task); "ps-null" writes the sparse form's PS list as null (as
upstream does for a dynamic-worker job without PS); "master" renames the chief's key to
"master" (upstream's key for the Master replica type).
"""

from __future__ import annotations

import argparse
import json
import os

import common
import tensorflow as tf
from tensorflow.python.distribute import multi_worker_util


def verdict(config: dict[str, object], use: str) -> tuple[list[str], str | None]:
    """The cluster's job names and TensorFlow's error for ``config``, None if it took it."""
    given = os.environ.get("TF_CONFIG")
    os.environ["TF_CONFIG"] = json.dumps(config)
    try:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        spec = resolver.cluster_spec()
        if use == "server":
            # Not started: the port is bound and the cluster given to the runtime.
            tf.distribute.Server(
                spec,
                job_name=resolver.task_type,
                task_index=resolver.task_id,
                protocol="grpc",
                start=False,
            )
        else:
            multi_worker_util._validate_cluster_spec(spec, resolver.task_type, resolver.task_id)
    except (TypeError, ValueError) as e:
        return [], f"{type(e).__name__}: {e}"
    finally:
        os.environ["TF_CONFIG"] = given or ""
    return sorted(spec.jobs), None


def variant(config: dict[str, object], name: str, evaluators: int) -> dict[str, object]:
    cluster = dict(config["cluster"])  # type: ignore[call-overload]
    task = dict(config["task"])  # type: ignore[call-overload]
    if name == "evaluators":
        cluster["evaluator"] = [f"evaluator-{i}.invalid:2222" for i in range(evaluators)]
    elif name == "ps-null":
        cluster["ps"] = None
    elif name == "master":
        cluster["master"] = cluster.pop("chief", ["master-0.invalid:2222"])
        if task["type"] == "chief":
            task["type"] = "master"
    return {**config, "cluster": cluster, "task": task}


p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--variants", default="", help="comma-separated: evaluators,ps-null,master")
p.add_argument("--evaluators", type=int, default=1)
p.add_argument("--use", choices=["strategy", "server"], default="strategy")
args = p.parse_args()

own = json.loads(os.environ.get("TF_CONFIG") or "{}")
jobs, error = verdict(own, args.use)
common.progress(event="own", jobs=jobs, error=error, tf_config=own)
for name in filter(None, args.variants.split(",")):
    jobs, error = verdict(variant(own, name, args.evaluators), args.use)
    common.progress(event="variant", name=name, jobs=jobs, error=error)
