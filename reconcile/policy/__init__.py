"""The behaviours of the API, one module each and named after the field where there is
one, as pure functions over a job and its observed children: restartPolicy and backoff
(restart, pod_outcome), success_policy, backoff_limit, active_deadline (and verdict,
the order they end a job in), clean_pod_policy, ttl_after_finished (and cleanup, the
two applied to a finished job), gang scheduling, whole-gang restart, outcome tracking,
create failures, the child diffs, conditions and status. Each has its table test in
tests/unit/reconcile/policy/. Imports api/ and objects/.
"""
