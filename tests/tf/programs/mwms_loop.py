"""A custom training loop under MultiWorkerMirroredStrategy: no Model.fit, the steps
written out (strategy.run, all-reduced gradients through the optimizer, the loss
reduced across workers), over the workers (and optional chief) TF_CONFIG lists.
"""

from __future__ import annotations

import common
import tensorflow as tf
import tf_keras

# The strategy first: it starts this process's gRPC server and must exist before any
# other TensorFlow op runs.
strategy = tf.distribute.MultiWorkerMirroredStrategy()
args = common.flags(__doc__).parse_args()

tf_keras.utils.set_random_seed(common.SEED)
replicas = strategy.num_replicas_in_sync
global_batch = args.batch_size * replicas


def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
    # One input pipeline per worker, each on its own shard of the same examples.
    x, y = common.synthetic(4096)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(
        ctx.num_input_pipelines, ctx.input_pipeline_id
    )
    ds = ds.shuffle(4096, seed=common.SEED).repeat()
    return ds.batch(ctx.get_per_replica_batch_size(global_batch))


batches = iter(strategy.distribute_datasets_from_function(dataset_fn))

with strategy.scope():
    model = common.build_model()
    optimizer = tf_keras.optimizers.SGD(args.learning_rate)


@tf.function
def train_step(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
            # Scaled by the global batch: the gradients are summed over all replicas.
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    per_replica = strategy.run(step, args=next(iterator))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


common.progress(event="start", initial_epoch=0, step=0, replicas_in_sync=replicas)
for epoch in range(1, args.epochs + 1):
    total = 0.0
    for i in range(1, args.steps_per_epoch + 1):
        total += float(train_step(batches))
        step = int(optimizer.iterations.numpy())
        if args.log_every and step % args.log_every == 0:
            common.progress(
                event="step",
                epoch=epoch,
                step=step,
                loss=round(total / i, 6),
                replicas_in_sync=replicas,
            )
    loss = round(total / args.steps_per_epoch, 6)
    common.progress(
        event="epoch",
        epoch=epoch,
        step=int(optimizer.iterations.numpy()),
        loss=loss,
        replicas_in_sync=replicas,
    )
common.progress(event="done", epochs=args.epochs, replicas_in_sync=replicas)
