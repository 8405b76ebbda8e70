"""Model.fit with Keras 3 (the `keras` package on TensorFlow) on one replica, reporting
its progress with the reporting helper's callback built on Keras 3's Callback class.
Keras 3's multi-worker training does not work in TensorFlow 2.21 (the other programs
use tf_keras); a single replica is what Keras 3 users run.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import common
import keras
import tfjob_progress

args = common.flags(__doc__).parse_args()
keras.utils.set_random_seed(common.SEED)
x, y = common.synthetic(4096)
model = keras.Sequential(
    [
        keras.Input(shape=(common.FEATURES,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(args.learning_rate), loss="mse")


class Lines(keras.callbacks.Callback):
    """The epoch lines the tests read (common.progress), from Keras 3's own logs."""

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        common.progress(
            event="epoch",
            epoch=epoch + 1,
            step=int(self.model.optimizer.iterations.numpy()),
            loss=round(float((logs or {})["loss"]), 6),
            replicas_in_sync=1,
            keras=keras.__version__,
        )


model.fit(
    x,
    y,
    batch_size=args.batch_size,
    epochs=args.epochs,
    steps_per_epoch=args.steps_per_epoch,
    callbacks=[Lines(), tfjob_progress.keras_callback(keras)],
    verbose=0,
)
common.progress(event="done", epochs=args.epochs, replicas_in_sync=1)
