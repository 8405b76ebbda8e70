"""Asynchronous parameter-server training, between-graph: every worker runs a training
loop of its own against variables the ps tasks hold (TensorFlow's tf.compat.v1 graph
API: a replica device setter and a MonitoredTrainingSession), so each worker steps at
its own rate, and a slow node shows as a slow worker. Worker 0 is the chief: it
initialises the variables, and the others wait for it. The ps tasks serve until the job
ends (SIGTERM: exit 143).

Each worker reports its own step (tfjob_progress) and prints a progress line every
--log-every steps; it trains for --seconds, then reports its last step as final.
"""

from __future__ import annotations

import time

import common
import tensorflow as tf
import tfjob_progress

p = common.flags(__doc__)
p.add_argument("--seconds", type=float, default=120.0, help="how long each worker trains")
p.add_argument("--width", type=int, default=256, help="the layers' width: the CPU a step takes")
args = p.parse_args()

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
role, index = resolver.task_type, resolver.task_id
cluster = resolver.cluster_spec()
tf.compat.v1.disable_eager_execution()
server = tf.distribute.Server(cluster, job_name=role, task_index=index, start=True)

if role == "ps":
    common.progress(event="serving", target=server.target)
    while True:  # not Server.join(): the SIGTERM handler runs between bytecodes
        time.sleep(1)

setter = tf.compat.v1.train.replica_device_setter(
    worker_device=f"/job:worker/task:{index}", cluster=cluster
)
with tf.compat.v1.device(setter):
    step = tf.compat.v1.train.get_or_create_global_step()
    weights = tf.compat.v1.get_variable(
        "weights", [args.width, args.width], initializer=tf.compat.v1.glorot_uniform_initializer()
    )
    x = tf.random.normal([args.batch_size, args.width], seed=common.SEED)
    h = x
    for _ in range(4):
        h = tf.tanh(tf.matmul(h, weights))
    loss = tf.reduce_mean(tf.square(h - x))
    train = tf.compat.v1.train.GradientDescentOptimizer(args.learning_rate).minimize(
        loss, global_step=step
    )

# this worker talks to the ps tasks and itself only: no waiting on the other workers
config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
local = 0
common.progress(event="start", step=0)
with tf.compat.v1.train.MonitoredTrainingSession(
    master=server.target, is_chief=index == 0, config=config
) as sess:
    until = time.monotonic() + args.seconds
    while time.monotonic() < until:
        _, value = sess.run([train, loss])
        local += 1
        tfjob_progress.report(local, metrics={"loss": float(value)})
        if args.log_every and local % args.log_every == 0:
            common.progress(event="step", step=local, loss=float(value))
tfjob_progress.report(local, final=True)
common.progress(event="done", step=local)
