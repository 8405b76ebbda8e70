"""Model.fit under MultiWorkerMirroredStrategy (tf_keras), over the workers (and the
optional chief) TF_CONFIG lists; every one of them runs this same program.

With --backup-dir (or TFJOB_BACKUP_DIR) a BackupAndRestore callback saves the training
state every --save-freq steps (or each epoch) and restores it at start: a restarted job
resumes where the last backup left it, which its "start" progress line shows
(initial_epoch, step). Every worker restores from the chief's backup (worker 0's when
there is no chief), so the directory must be one all pods share.
"""

from __future__ import annotations

import os

import common
import tensorflow as tf
import tf_keras
import tfjob_progress

p = common.flags(__doc__)
p.add_argument("--backup-dir", default=os.environ.get("TFJOB_BACKUP_DIR"))
p.add_argument("--save-freq", default="epoch", help='"epoch" or a number of steps')
p.add_argument(
    "--heartbeat-timeout",
    type=float,
    help="seconds before TensorFlow's coordination service declares a silent peer dead and"
    " aborts the collectives (its default: 10). A test that freezes a peer (SIGSTOP) sets"
    " it long, so the freeze looks like the hangs heartbeats never catch: an input"
    " pipeline stuck on a mount, a deadlock in user code, a process that still answers",
)
args = p.parse_args()

if args.heartbeat_timeout is not None:
    # MWMS configures the coordination service itself, with the default timeout; the
    # timeout is not one of its options, so its call is given it
    from tensorflow.python.eager import context as tf_context

    configure = tf_context.Context.configure_coordination_service
    timeout_ms = int(args.heartbeat_timeout * 1000)

    def patient(self: object, *a: object, **kw: object) -> object:
        return configure(self, *a, **{**kw, "heartbeat_timeout_in_ms": timeout_ms})  # type: ignore[arg-type]

    tf_context.Context.configure_coordination_service = patient  # type: ignore[method-assign]

# The strategy first: it starts this process's gRPC server and must exist before any
# other TensorFlow op runs.
strategy = tf.distribute.MultiWorkerMirroredStrategy()

tf_keras.utils.set_random_seed(common.SEED)
replicas = strategy.num_replicas_in_sync
global_batch = args.batch_size * replicas

x, y = common.synthetic(4096)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=common.SEED)
dataset = dataset.repeat().batch(global_batch)
# Each worker takes its share of every global batch (the data is in memory, not files).
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = dataset.with_options(options)

with strategy.scope():
    model = common.build_model()
    model.compile(optimizer=tf_keras.optimizers.SGD(args.learning_rate), loss="mse")

callbacks: list[tf_keras.callbacks.Callback] = []
if args.backup_dir:
    save_freq = args.save_freq if args.save_freq == "epoch" else int(args.save_freq)
    # Kept after a finished fit, so a test can tell a restart from a fresh start.
    callbacks.append(
        tf_keras.callbacks.BackupAndRestore(
            args.backup_dir, save_freq=save_freq, delete_checkpoint=False
        )
    )
callbacks.append(common.Progress(replicas, args.log_every))  # after the restore
# The job's training progress, reported to the controller (docs/progress.md).
callbacks.append(tfjob_progress.keras_callback(tf_keras))

model.fit(
    dataset,
    epochs=args.epochs,
    steps_per_epoch=args.steps_per_epoch,
    callbacks=callbacks,
    verbose=0,
)
common.progress(event="done", epochs=args.epochs, replicas_in_sync=replicas)
