"""Prometheus metrics: counters, gauges and histograms with labels, in the text format.

The controller needs little of a Prometheus client: a handful of metric families set
from one event loop, and a scrape now and then. prometheus_client brings its own HTTP
servers, multiprocess mode and OpenMetrics on top (about 5 MB of a 60 MB process and
50 ms of start-up), so this is the part we use, exposed as the text format 0.0.4 that
every Prometheus reads. Counters are exposed with a ``_total`` suffix (added when the
name lacks it) and histograms as cumulative ``_bucket{le}``, ``_sum`` and ``_count``,
as client libraries do; no ``_created`` samples (client-go has none either).

``Registry.sample`` reads one sample back, for tests. ``process_collector`` adds the
standard ``process_*`` metrics from /proc, as the Go and Python clients do.
"""

from __future__ import annotations

import bisect
import math
import os
import resource
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[str, ...]
Sample = tuple[str, dict[str, str], float]
C = TypeVar("C")


def format_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape_label(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n")


class _Family(Generic[C]):
    """A metric family: one child of type C per label-value tuple."""

    kind = ""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *, registry: Registry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames: Labels = tuple(labelnames)
        self._children: dict[Labels, C] = {}
        registry.register(self)

    def labels(self, *values: str) -> C:
        key = tuple(str(v) for v in values)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {key}")
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child()
        return child

    def _new_child(self) -> C:
        raise NotImplementedError

    def _labels(self, values: Labels, extra: dict[str, str] | None = None) -> dict[str, str]:
        out = dict(zip(self.labelnames, values, strict=True))
        if extra:
            out.update(extra)
        return out

    def exposed_name(self) -> str:
        return self.name

    def samples(self) -> Iterator[Sample]:
        raise NotImplementedError


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self.value += amount


class Counter(_Family[CounterChild]):
    kind = "counter"

    def _new_child(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def exposed_name(self) -> str:
        return self.name if self.name.endswith("_total") else self.name + "_total"

    def samples(self) -> Iterator[Sample]:
        name = self.exposed_name()
        for values, child in self._children.items():
            yield name, self._labels(values), child.value


class GaugeChild:
    __slots__ = ("_function", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self._function: Callable[[], float] | None = None

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)

    def set_function(self, function: Callable[[], float]) -> None:
        """The value is read from ``function`` at each scrape."""
        self._function = function

    def get(self) -> float:
        return float(self._function()) if self._function is not None else self.value


class Gauge(_Family[GaugeChild]):
    kind = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild()

    def set(self, value: float) -> None:
        self.labels().set(value)

    def samples(self) -> Iterator[Sample]:
        for values, child in self._children.items():
            yield self.name, self._labels(values), child.get()


class HistogramChild:
    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        # the first bound >= value; the last bound is +Inf, so there always is one
        self.counts[bisect.bisect_left(self.bounds, value)] += 1


DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Histogram(_Family[HistogramChild]):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Iterable[float] = DEFAULT_BUCKETS,
        registry: Registry,
    ) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.bounds = tuple(bounds)
        super().__init__(name, documentation, labelnames, registry=registry)
        if not self.labelnames:
            self.labels()  # an unlabelled histogram is there from the start

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def samples(self) -> Iterator[Sample]:
        for values, child in self._children.items():
            cumulative = 0
            for bound, n in zip(self.bounds, child.counts, strict=True):
                cumulative += n
                le = {"le": format_value(bound)}
                yield self.name + "_bucket", self._labels(values, le), float(cumulative)
            yield self.name + "_count", self._labels(values), float(child.count)
            yield self.name + "_sum", self._labels(values), child.sum


#: A collector yields (name, type, help, samples) families computed at scrape time.
Collector = Callable[[], Iterable[tuple[str, str, str, list[Sample]]]]


class Registry:
    def __init__(self) -> None:
        self._families: dict[str, _Family[Any]] = {}
        self._collectors: list[Collector] = []

    def register(self, family: _Family[Any]) -> None:
        name = family.exposed_name()
        if name in self._families:
            raise ValueError(f"metric {name} registered twice")
        self._families[name] = family

    def add_collector(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def _families_now(self) -> Iterator[tuple[str, str, str, list[Sample]]]:
        for name, family in self._families.items():
            yield name, family.kind, family.documentation, list(family.samples())
        for collector in self._collectors:
            yield from collector()

    def expose(self) -> bytes:
        """The text format 0.0.4."""
        lines: list[str] = []
        for name, kind, doc, samples in self._families_now():
            lines.append(f"# HELP {name} {_escape_help(doc)}")
            lines.append(f"# TYPE {name} {kind}")
            for sample_name, labels, value in samples:
                if labels:
                    pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
                    lines.append(f"{sample_name}{{{pairs}}} {format_value(value)}")
                else:
                    lines.append(f"{sample_name} {format_value(value)}")
        return ("\n".join(lines) + "\n").encode()

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One sample's value, or None when there is no such sample."""
        want = labels or {}
        for _family, _kind, _doc, samples in self._families_now():
            for sample_name, sample_labels, value in samples:
                if sample_name == name and sample_labels == want:
                    return value
        return None


def process_collector() -> Collector:
    """process_* metrics as the Go and Python clients export them (Linux /proc)."""
    try:
        ticks = float(os.sysconf("SC_CLK_TCK"))
        page = float(os.sysconf("SC_PAGE_SIZE"))
        with open("/proc/stat", "rb") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith(b"btime"))
    except (OSError, ValueError, StopIteration):
        return lambda: ()

    def collect() -> Iterable[tuple[str, str, str, list[Sample]]]:
        try:
            with open("/proc/self/stat", "rb") as f:
                # fields after the command name, which may itself hold spaces
                fields = f.read().rsplit(b")", 1)[1].split()
            fds = len(os.listdir("/proc/self/fd"))
        except OSError:
            return
        utime, stime = float(fields[11]), float(fields[12])
        start = float(fields[19]) / ticks + boot
        vsize, rss = float(fields[20]), float(fields[21]) * page
        soft, _hard = _max_fds()
        yield (
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            [("process_cpu_seconds_total", {}, (utime + stime) / ticks)],
        )
        for name, kind, doc, value in (
            ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss),
            ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vsize),
            (
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                start,
            ),
            ("process_open_fds", "gauge", "Number of open file descriptors.", float(fds)),
            ("process_max_fds", "gauge", "Maximum number of open file descriptors.", soft),
        ):
            yield name, kind, doc, [(name, {}, value)]

    return collect


def _max_fds() -> tuple[float, float]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return float(soft), float(hard)


__all__ = [
    "CONTENT_TYPE",
    "Counter",
    "Gauge",
    "Histogram",
    "Registry",
    "format_value",
    "process_collector",
]
