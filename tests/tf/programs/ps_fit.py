"""Parameter-server training, one program for every role; TF_CONFIG says which.

- chief: the coordinator. It runs Model.fit (tf_keras) with a dataset function that
  each worker calls for its own input pipeline, schedules the steps onto the workers
  and, with --checkpoint-dir (or TFJOB_CHECKPOINT_DIR), writes a checkpoint (the model
  and the epoch) after each epoch, which evaluator.py reads. It exits when fit is done.
- worker, ps: a TensorFlow server that the coordinator drives (workers run the steps,
  ps tasks hold the variables). They never exit on their own: the job ends with the
  chief (TFJob's success policy), and the rest are stopped (SIGTERM: exit 143).
- With --backup-dir the chief backs training up (BackupAndRestore) at each epoch's end
  and, started again (a whole-gang restart after a ps was lost), resumes there.
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
import tfjob_progress

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
# every task of the cluster TF_CONFIG gives it, as it is: an evaluator listed there,
# which runs no server, would be waited for forever (docs/semantics.md#tf_config).
strategy = tf.distribute.ParameterServerStrategy(resolver)
p = common.flags(__doc__)
p.add_argument("--checkpoint-dir", default=os.environ.get("TFJOB_CHECKPOINT_DIR"))
p.add_argument(
    "--backup-dir",
    default=os.environ.get("TFJOB_BACKUP_DIR"),
    help="BackupAndRestore at each epoch's end: a coordinator started again resumes there",
)
args = p.parse_args()
tf_keras.utils.set_random_seed(common.SEED)
workers = len(resolver.cluster_spec().as_dict().get("worker", []))


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
# The job's training progress, from the coordinator: epochs only, for the same reason.
callbacks.append(tfjob_progress.keras_callback(tf_keras, every_n_batches=0))
if args.checkpoint_dir:
    callbacks.append(Checkpoints(args.checkpoint_dir))
if args.backup_dir:
    # First: it restores in on_train_begin, before Progress reports where training starts.
    backup = tf_keras.callbacks.BackupAndRestore(args.backup_dir, delete_checkpoint=False)
    callbacks.insert(0, backup)
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
