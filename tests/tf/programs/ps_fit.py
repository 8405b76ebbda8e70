"""Parameter-server training, one program for every role; TF_CONFIG says which.

- chief: the coordinator. It runs Model.fit (tf_keras) with a dataset function that
  each worker calls for its own input pipeline, schedules the steps onto the workers
  and, with --checkpoint-dir (or TFJOB_CHECKPOINT_DIR), writes a checkpoint (the model
  and the epoch) after each epoch, which evaluator.py reads. It exits when fit is done.
- worker, ps: a TensorFlow server that the coordinator drives (workers run the steps,
  ps tasks hold the variables). They never exit on their own: the job ends with the
  chief (TFJob's success policy), and the rest are stopped (SIGTERM: exit 143).
- An evaluator must not run this: it joins no cluster (see evaluator.py).
"""

from __future__ import annotations

import os
import time

# A worker or ps that goes away must fail the RPC at once, for the coordinator to
# reschedule, not be waited for; every task, before gRPC starts.
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import common
import tensorflow as tf
import tf_keras

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
role = resolver.task_type

if role in ("worker", "ps"):
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=role,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    common.progress(event="serving", target=server.target)
    while True:  # the server's threads serve; this one waits for SIGTERM (common.py)
        time.sleep(3600)
if role != "chief":
    raise SystemExit(f"ps_fit.py runs as chief, worker or ps, not {role!r}")

# The coordinator: the strategy first, before any other TensorFlow op. It connects to
# every task of the cluster it is given, and waits (over ten minutes, seen) for one
# that runs no server: TFJob's TF_CONFIG, like upstream's, lists the evaluator too,
# which must not join, so it is left out here.
cluster = {
    job: tasks for job, tasks in resolver.cluster_spec().as_dict().items() if job != "evaluator"
}
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec(cluster),
    task_type=role,
    task_id=resolver.task_id,
    rpc_layer=resolver.rpc_layer or "grpc",
)
strategy = tf.distribute.ParameterServerStrategy(resolver)
p = common.flags(__doc__)
p.add_argument("--checkpoint-dir", default=os.environ.get("TFJOB_CHECKPOINT_DIR"))
args = p.parse_args()
tf_keras.utils.set_random_seed(common.SEED)
workers = len(cluster.get("worker", []))


def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
    # Called on each worker: its own shard, shuffled, repeated (fit counts the steps).
    x, y = common.synthetic(4096)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(
        ctx.num_input_pipelines, ctx.input_pipeline_id
    )
    return ds.shuffle(4096, seed=common.SEED).repeat().batch(args.batch_size).prefetch(2)


with strategy.scope():
    model = common.build_model()
    model.compile(optimizer=tf_keras.optimizers.SGD(args.learning_rate), loss="mse")


class Checkpoints(tf_keras.callbacks.Callback):
    """ckpt-<epoch> in the directory after each epoch: the model's variables (fetched
    from the ps tasks) and the epoch, for the evaluator."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.epoch = tf.Variable(0, dtype=tf.int64)
        self.manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model, epoch=self.epoch), directory, max_to_keep=None
        )

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.epoch.assign(epoch + 1)
        path = self.manager.save(checkpoint_number=epoch + 1)
        common.progress(event="checkpoint", epoch=epoch + 1, path=path)


# Epoch lines only: fit refuses batch-level callbacks under this strategy.
callbacks: list[tf_keras.callbacks.Callback] = [common.Progress(strategy.num_replicas_in_sync, 0)]
if args.checkpoint_dir:
    callbacks.append(Checkpoints(args.checkpoint_dir))
model.fit(
    tf_keras.utils.experimental.DatasetCreator(dataset_fn),
    epochs=args.epochs,
    steps_per_epoch=args.steps_per_epoch,
    callbacks=callbacks,
    verbose=0,
)
common.progress(
    event="done",
    epochs=args.epochs,
    workers=workers,
    replicas_in_sync=strategy.num_replicas_in_sync,
)
