"""reconcile: the TFJob logic, knowing nothing of watches, queues or leases.

The parts, lowest first (each may import the ones before it, never after;
hack/check_layers.py enforces it):

- ``api/``: what a TFJob is: its vocabulary (names), models and status types,
  defaulting, validation, the admission schema, labels, quantities, and the job as the
  planner reads it (spec).
- ``objects/``: the objects built from a job: pods, headless services, TF_CONFIG; and
  each observed pod read once into a typed view (observed).
- ``policy/``: one module per API field or behaviour: restart policies and replica
  accounting (restart), success_policy, backoff_limit, active_deadline and the order
  they end a job in (verdict), clean_pod_policy and ttl_after_finished (applied
  together by cleanup), gang scheduling and whole-gang restart, outcome tracking,
  create failures, the child diffs, conditions and the new status.
- ``progress/``: training progress as the training processes report it, and what the
  controller does with it: trainingProgress, the progress deadline (the Stalled
  condition) and the restart guard.
- ``plan/``: compute_plan, a pure function from a snapshot of the caches to a Plan:
  every create, delete, status and event of one pass.
- ``sync/`` and ``explain.py``, the plan's two users. sync/ is the only part that meets
  the machinery: the reconciler (tfjob), the one write layer (writes), the event
  handlers, expectation keys, pacing, job metrics and the slim cache transforms.
  explain works out a plan with no cluster.

One pass, followed: a pod of job ``ns/mnist`` changes; sync/handlers.py maps it to the
key and says how urgently; sync/tfjob.py takes the key, checks the expectations, reads
the job, its pods (each read once, objects/observed.py) and services from the caches
into a Snapshot and calls plan.compute_plan, which asks api/ for the spec, policy/ what
each pod means and what the job's state now is, and objects/ for the objects to create.
sync/child_writes.py then creates and deletes children and releases tracking finalizers,
sync/writes.py writes the status, and the handlers see the results come back through the
caches.
"""
