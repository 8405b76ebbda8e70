"""What the training programs share: their flags, the task TF_CONFIG names, the
synthetic data and model, and the progress lines tests read from their output.

A program prints one JSON line per epoch (and every --log-every steps where it can) on
stdout, flushed at once, so a test reading a pod's log sees real training as it goes:

    {"tfjob_progress": {"event": "epoch", "epoch": 2, "step": 40, "loss": 0.31, "replicas_in_sync": 2, "task": "worker:0"}}

"event" is start (initial_epoch: epochs already done, after a restore), step, epoch (the
1-based epoch just ended; loss: its mean), done, and the PS and evaluator programs' own.

TensorFlow's own logging goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

# tf.keras is Keras 3 in TensorFlow 2.21, whose multi-worker training does not work;
# the programs use tf_keras (Keras 2) and say so to TensorFlow too. The image sets it
# as well; set here so the programs behave the same outside it.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tf_keras

FEATURES = 8
SEED = 42
#: the line the data comes from: y = x · W + 0.5, plus a little noise
W = np.linspace(-1.0, 1.0, FEATURES, dtype="float32")


def exit_on_sigterm() -> None:
    """Exit 143 on SIGTERM. The image's entrypoint is python3 itself, so in a pod it is
    PID 1, and the kernel does not deliver to PID 1 a signal it has no handler for:
    without this a deleted pod would wait out its whole grace period. The handler runs between
    bytecodes, so a program must not block in one long native call (ps_fit.py's servers
    sleep instead of Server.join())."""
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))


exit_on_sigterm()


def task() -> str:
    """ "type:index" of this process in TF_CONFIG ("local:0" without one)."""
    t = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    return f"{t.get('type', 'local')}:{t.get('index', 0)}"


def progress(**fields: object) -> None:
    print(json.dumps({"tfjob_progress": {**fields, "task": task()}}), flush=True)


def synthetic(n: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """n examples of a noisy linear function, the same for every process given the seed."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = x @ W + 0.5 + 0.05 * rng.normal(size=n).astype("float32")
    return x, y.reshape(-1, 1)


def build_model() -> tf_keras.Model:
    """A small MLP: a few seconds of CPU to fit, and its loss falls visibly each epoch."""
    return tf_keras.Sequential(
        [
            tf_keras.Input(shape=(FEATURES,)),
            tf_keras.layers.Dense(16, activation="relu"),
            tf_keras.layers.Dense(1),
        ]
    )


def flags(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per replica")
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument(
        "--log-every", type=int, default=10, help="steps between progress lines (0: none)"
    )
    return p


class Progress(tf_keras.callbacks.Callback):
    """Progress lines from Model.fit: where training starts (after a restore, the epoch
    and step it resumes at), every log_every steps where fit reports them, each epoch."""

    def __init__(self, replicas_in_sync: int, log_every: int) -> None:
        super().__init__()
        self.replicas = replicas_in_sync
        self.log_every = log_every
        self.started = False
        self.epoch = 0

    def _implements_train_batch_hooks(self) -> bool:
        # ParameterServerStrategy refuses callbacks with batch hooks: log_every=0 there.
        return bool(self.log_every)

    def step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.epoch = epoch
        if not self.started:
            # BackupAndRestore restores in on_train_begin, so this is the resumed state.
            self.started = True
            progress(
                event="start", initial_epoch=epoch, step=self.step(), replicas_in_sync=self.replicas
            )

    def on_train_batch_end(self, batch: int, logs: dict[str, float] | None = None) -> None:
        step = self.step()
        if self.log_every and step % self.log_every == 0:
            # The model's metrics, not `logs`: under MultiWorkerMirroredStrategy tf_keras's
            # per-batch logs are not the mean loss (with two workers, twice it); its epoch
            # logs are read like this. Every worker reads at the same steps, as the read
            # is a collective.
            loss = float(self.model.get_metrics_result()["loss"])
            progress(
                event="step",
                epoch=self.epoch + 1,
                step=step,
                loss=round(loss, 6),
                replicas_in_sync=self.replicas,
            )

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        loss = round(float((logs or {})["loss"]), 6)
        progress(
            event="epoch",
            epoch=epoch + 1,
            step=self.step(),
            loss=loss,
            replicas_in_sync=self.replicas,
        )
