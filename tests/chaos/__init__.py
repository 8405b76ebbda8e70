"""The chaos suite at scale (issue 11, item 5): many TFJobs of mixed shapes and restart
policies under pod kills, controller SIGKILLs, apiserver and etcd restarts, watch faults
and leader partitions, with two leader-elected controller replicas, while invariants are
checked from the apiserver's audit log and a watch history as the run goes.

    python -m tests.chaos --seed N [--jobs 50 --kills 300 ... --duration 480]
    make chaos                      (seeds 1 2 3 at full size)

Modules: plan (size and seeded schedule), model (what each job must end as), proxy (the
TCP fault proxy), replicas (the controller pair and its supervisor), history (watch
invariants), audit (audit-log invariants), podfaults and actions (the faults), driver
(one run), report, cli. tests/cluster/test_chaos_scale.py runs a short seeded version.
"""
