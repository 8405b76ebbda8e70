"""Benchmark: the controller side by side with the floor, on one local apiserver.

    hack/bench [--jobs 200] [--replicas 8] [--qps unlimited,20/30] [--profile]
               [--compare upstream] [--keep-cluster] [--out bench-out]
    hack/bench --scaling 200,1000,5000 [--qps unlimited] [--compare upstream]

For every QPS mode, two phases run one after the other on the same local control plane
(its own cluster directory, default <repo>/.cluster-bench, started with an audit log):

1. **ours**: tfjob-controller runs as a process; the harness submits N TFJobs (1 Chief +
   M-1 Workers each) at once, watches pods, services and TFJobs, and as soon as all M
   pods of a job run lets the chief exit 0 (one annotation patch per job; kwok finishes
   the pod). The phase ends when every job is Succeeded.
2. **floor**: a bare asyncio client (aiohttp + orjson, a semaphore as wide as the
   controller's connection pool, a token bucket at the same QPS) submits the same
   TFJobs and POSTs exactly the pod and service bodies the controller would (computed
   by the controller's own planner) into a fresh namespace. No controller runs.

With --compare upstream, the upstream TFJob controller (kubeflow/training-operator's
reconciler under the wrapper main in hack/upstream-operator/, user agent
"tfjob-upstream") runs phase 1 too, with --controller-threads and with its default of
one thread, between ours and the floor (upstream.py).

Figures come from the apiserver's audit log (server-side timestamps, user agents
"tfjob-controller" and "tfjob-bench-floor"), the harness's watch events (status
latency) and psutil on the controller process (CPU, RSS). Writes a markdown table to
stdout and <out>/results.md, raw numbers to <out>/results.json, a plot of objects
created over time to <out>/created-over-time.png, and with --profile a pyinstrument
profile of the first controller run to <out>/profile.html and profile.txt.

With --scaling, the controller phases and the floor run at each job count in the first
QPS mode (hack/benchmark/scaling.py, `make bench-scale`): creation against the floor,
status p99, CPU per pod, peak RSS, RSS slope per cached object, and what the control
plane needed (hack/benchmark/control_plane.py).

Run as `hack/bench` or `python -m hack.benchmark` from the repository root.
"""
