"""The evaluator: evaluates each checkpoint the chief writes (ps_fit.py --checkpoint-dir)
on held-out data, in order, as they appear, until the one of the last epoch (exit 0),
or none came for --timeout seconds (exit 1).

It never joins the training cluster: it creates no strategy and starts no server, so
the cluster neither waits for it nor fails with it; TF_CONFIG only names its task.
"""

from __future__ import annotations

import argparse
import os
import time

import common
import tensorflow as tf

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--epochs", type=int, default=5, help="the chief's: stop after this one")
p.add_argument("--checkpoint-dir", default=os.environ.get("TFJOB_CHECKPOINT_DIR"))
p.add_argument("--timeout", type=float, default=300, help="seconds to wait for a new checkpoint")
args = p.parse_args()
if not args.checkpoint_dir:
    p.error("--checkpoint-dir or TFJOB_CHECKPOINT_DIR is required")

model = common.build_model()
epoch = tf.Variable(0, dtype=tf.int64)
checkpoint = tf.train.Checkpoint(model=model, epoch=epoch)
x, y = common.synthetic(1024, seed=common.SEED + 1)  # examples training never saw

common.progress(event="start", checkpoint_dir=args.checkpoint_dir)
done: set[str] = set()
last = 0
deadline = time.monotonic() + args.timeout
while last < args.epochs and time.monotonic() < deadline:
    # Every checkpoint, oldest first (the chief's manager keeps them all); its state
    # file names a checkpoint only once the checkpoint is written.
    state = tf.train.get_checkpoint_state(args.checkpoint_dir)
    new = [c for c in (state.all_model_checkpoint_paths if state else []) if c not in done]
    if not new:
        time.sleep(0.5)
        continue
    for path in new:
        checkpoint.restore(path).expect_partial()
        last = int(epoch.numpy())
        loss = float(tf.reduce_mean(tf.square(model(x) - y)))
        common.progress(
            event="evaluation",
            epoch=last,
            checkpoint=os.path.basename(path),
            eval_loss=round(loss, 6),
        )
        done.add(path)
    deadline = time.monotonic() + args.timeout
common.progress(event="done", epochs=last)
raise SystemExit(0 if last >= args.epochs else 1)
