"""Prometheus metrics with the names the ecosystem's dashboards already use.

- Work queues (client-go names, label ``name``): workqueue_depth, workqueue_adds_total,
  workqueue_queue_duration_seconds, workqueue_work_duration_seconds,
  workqueue_unfinished_work_seconds, workqueue_longest_running_processor_seconds,
  workqueue_retries_total, and one of ours: workqueue_waiting_items (items parked by a
  delayed or rate-limited requeue until their time comes). Histogram buckets 1us to
  1000s (powers of 10), as client-go.
  ``adds`` counts only adds that made the item dirty (deduped adds are free); queue
  duration runs from the first add to get, work duration from get to done. The two
  in-flight gauges are computed at scrape time instead of on a 500ms ticker.
- Reconciles (controller-runtime names, label ``controller``):
  controller_runtime_reconcile_total{controller,result} with result in success | error
  | requeue | requeue_after, controller_runtime_reconcile_errors_total,
  controller_runtime_terminal_reconcile_errors_total,
  controller_runtime_reconcile_time_seconds, controller_runtime_active_workers,
  controller_runtime_max_concurrent_reconciles; and ours,
  controller_background_work (writes reconciles handed off to run in the background,
  such as creates waiting for the client's rate limit, not finished yet).
- event_loop_lag_seconds: how late the event loop woke a periodic sleeper
  (controller.observability.looplag); anything above a few ms is a callback that blocked the loop.
- events_dropped_total{reason} (why an Event went unwritten) and
  controller_events_total{type,reason} (every Event recorded: Warnings such as
  FailedCreatePod are what an alert on failed writes watches).
- leader_election_master_status{name}: 1 while this process holds the lease named
  ``name``, else 0; ``leader_status(name)`` is the setter for LeaseElector's on_change.

The process_* metrics (CPU, RSS, open fds, start time) come with the registry.
Every label set is created at registration (zero-initialised) so rate() works from the
first scrape. Metrics live in a ``Metrics`` object with its own registry, so tests and
several managers in one process never collide.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from controller.observability.prometheus import (
    Counter,
    Gauge,
    Histogram,
    Registry,
    process_collector,
)
from controller.types import Clock

QUEUE_BUCKETS = tuple(10.0**e for e in range(-6, 4))
RECONCILE_RESULTS = ("success", "error", "requeue", "requeue_after")
#: why an Event goes unwritten (controller.runtime.events)
DROP_REASONS = ("buffer_full", "namespace_terminating", "write_failed")


class QueueMetricsRecorder:
    """Implements controller.queue.workqueue.QueueMetrics for one named queue."""

    def __init__(self, metrics: Metrics, name: str, clock: Clock) -> None:
        self._clock = clock
        self._depth = metrics.wq_depth.labels(name)
        self._adds = metrics.wq_adds.labels(name)
        self._latency = metrics.wq_latency.labels(name)
        self._work = metrics.wq_work_duration.labels(name)
        self._retries = metrics.wq_retries.labels(name)
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}
        metrics.wq_unfinished.labels(name).set_function(self.unfinished_work)
        metrics.wq_longest.labels(name).set_function(self.longest_running)

    def add(self, item: Hashable) -> None:
        self._depth.inc()
        self._adds.inc()
        self._added_at.setdefault(item, self._clock.monotonic())

    def get(self, item: Hashable) -> None:
        now = self._clock.monotonic()
        self._depth.dec()
        added = self._added_at.pop(item, None)
        if added is not None:
            self._latency.observe(now - added)
        self._started_at[item] = now

    def done(self, item: Hashable) -> None:
        started = self._started_at.pop(item, None)
        if started is not None:
            self._work.observe(self._clock.monotonic() - started)

    def retry(self) -> None:
        self._retries.inc()

    def unfinished_work(self) -> float:
        now = self._clock.monotonic()
        return sum(now - t for t in self._started_at.values())

    def longest_running(self) -> float:
        now = self._clock.monotonic()
        return max((now - t for t in self._started_at.values()), default=0.0)


class ReconcileMetrics:
    def __init__(self, metrics: Metrics, controller: str, workers: int) -> None:
        self._total = {r: metrics.reconcile_total.labels(controller, r) for r in RECONCILE_RESULTS}
        self._errors = metrics.reconcile_errors.labels(controller)
        self._terminal = metrics.terminal_errors.labels(controller)
        self._time = metrics.reconcile_time.labels(controller)
        self.active_workers = metrics.active_workers.labels(controller)
        metrics.max_concurrent.labels(controller).set(workers)

    def observe(self, result: str, seconds: float, *, error: bool, terminal: bool) -> None:
        self._total[result].inc()
        if error:
            self._errors.inc()
        if terminal:
            self._terminal.inc()
        self._time.observe(seconds)


class Metrics:
    def __init__(self, registry: Registry | None = None) -> None:
        if registry is None:
            registry = Registry()
            registry.add_collector(process_collector())
        self.registry = registry
        r = self.registry
        self.wq_depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"], registry=r)
        self.wq_adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            ["name"],
            registry=r,
        )
        self.wq_latency = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            ["name"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.wq_work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            ["name"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.wq_unfinished = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration. Large values indicate stuck threads. One can deduce "
            "the number of stuck threads by observing the rate at which this increases.",
            ["name"],
            registry=r,
        )
        self.wq_longest = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            ["name"],
            registry=r,
        )
        self.wq_retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            ["name"],
            registry=r,
        )
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=r,
        )
        self.wq_waiting = Gauge(
            "workqueue_waiting_items",
            "Items parked by a delayed or rate-limited requeue, not yet due",
            ["name"],
            registry=r,
        )
        self.background_work = Gauge(
            "controller_background_work",
            "Writes that reconciles handed off to run in the background (creates at the"
            " client's rate limit, status writes), queued or running",
            ["controller"],
            registry=r,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=r,
        )
        self.loop_lag = Histogram(
            "event_loop_lag_seconds",
            "How late the event loop woke a task that slept for a fixed interval",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.gc_pause = Histogram(
            "python_gc_pause_seconds",
            "How long each garbage collection stopped the process, by generation"
            " (2: a full collection)",
            ["generation"],
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self._gc_pause_by_generation = tuple(self.gc_pause.labels(str(g)) for g in range(3))
        self.events_dropped = Counter(
            "events_dropped_total",
            "Kubernetes Events recorded but not written, by why: buffer_full (more distinct"
            " events pending than the buffer holds), namespace_terminating, write_failed",
            ["reason"],
            registry=r,
        )
        for why in DROP_REASONS:
            self.events_dropped.labels(why)
        self.events = Counter(
            "controller_events_total",
            "Kubernetes Events recorded (written or not; a repeat folded into an Event's"
            " count counts again), by type and reason",
            ["type", "reason"],
            registry=r,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=r,
        )

    def queue(self, name: str, clock: Clock) -> QueueMetricsRecorder:
        return QueueMetricsRecorder(self, name, clock)

    def reconciles(self, controller: str, workers: int) -> ReconcileMetrics:
        return ReconcileMetrics(self, controller, workers)

    def pending(
        self, name: str, waiting: Callable[[], float], background: Callable[[], float]
    ) -> None:
        """Read the queue's parked requeues and the controller's background work at each
        scrape (queue and controller share ``name``)."""
        self.wq_waiting.labels(name).set_function(waiting)
        self.background_work.labels(name).set_function(background)

    def event_dropped(self, why: str) -> None:
        """Pass as EventRecorder's ``on_drop``."""
        self.events_dropped.labels(why).inc()

    def gc_paused(self, generation: int, seconds: float) -> None:
        """One garbage collection's pause (controller.observability.heap.HeapKeeper)."""
        if 0 <= generation < len(self._gc_pause_by_generation):
            self._gc_pause_by_generation[generation].observe(seconds)

    def event_recorded(self, type_: str, reason: str) -> None:
        """Pass as EventRecorder's ``on_event``."""
        self.events.labels(type_, reason).inc()

    def leader_status(self, name: str) -> Callable[[bool], None]:
        """Sets leader_election_master_status{name} to 1 while leading, 0 otherwise: pass
        it as LeaseElector's ``on_change``. The gauge starts at 0 (not leading)."""
        gauge = self.leader.labels(name)
        gauge.set(0)

        def set_leading(leading: bool) -> None:
            gauge.set(1 if leading else 0)

        return set_leading
