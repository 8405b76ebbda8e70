from __future__ import annotations

import math
import os

import pytest

from controller.observability.prometheus import (
    Counter,
    Gauge,
    Histogram,
    Registry,
    format_value,
    process_collector,
)


def test_text_format_of_each_kind() -> None:
    r = Registry()
    c = Counter("jobs_created", "Jobs\ncreated", ["ns"], registry=r)
    c.labels('a"b\\c').inc(2)
    g = Gauge("depth", "Queue depth", ["name"], registry=r)
    g.labels("q").set(3)
    g.labels("fn").set_function(lambda: 7)
    h = Histogram("lag_seconds", "Lag", buckets=(0.1, 1), registry=r)
    for v in (0.05, 0.5, 5):
        h.observe(v)
    text = r.expose().decode()
    assert text.endswith("\n")
    lines = text.splitlines()
    # Counters get _total (as client libraries expose them), help text is escaped.
    assert lines[:3] == [
        "# HELP jobs_created_total Jobs\\ncreated",
        "# TYPE jobs_created_total counter",
        'jobs_created_total{ns="a\\"b\\\\c"} 2.0',
    ]
    assert 'depth{name="q"} 3.0' in lines and 'depth{name="fn"} 7.0' in lines
    # Cumulative buckets up to +Inf, then count and sum.
    assert lines[-6:] == [
        "# TYPE lag_seconds histogram",
        'lag_seconds_bucket{le="0.1"} 1.0',
        'lag_seconds_bucket{le="1.0"} 2.0',
        'lag_seconds_bucket{le="+Inf"} 3.0',
        "lag_seconds_count 3.0",
        "lag_seconds_sum 5.55",
    ]
    assert r.sample("lag_seconds_bucket", {"le": "1.0"}) == 2
    assert r.sample("jobs_created_total", {"ns": 'a"b\\c'}) == 2
    assert r.sample("jobs_created_total", {"ns": "other"}) is None


def test_names_and_labels_are_checked() -> None:
    r = Registry()
    Counter("x_total", "x", registry=r)
    with pytest.raises(ValueError, match="registered twice"):
        Counter("x", "x again", registry=r)  # the same exposed name, x_total
    c = Counter("y", "y", ["a", "b"], registry=r)
    with pytest.raises(ValueError, match="takes labels"):
        c.labels("only-one")
    with pytest.raises(ValueError, match="only goes up"):
        c.labels("1", "2").inc(-1)


def test_values_formatted_as_prometheus_reads_them() -> None:
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"
    assert format_value(math.nan) == "NaN"
    assert format_value(1e-06) == "1e-06"
    assert format_value(3) == "3.0"


def test_process_metrics_from_proc() -> None:
    r = Registry()
    r.add_collector(process_collector())
    text = r.expose().decode()
    assert "# TYPE process_cpu_seconds_total counter" in text
    rss = r.sample("process_resident_memory_bytes")
    assert rss is not None and 10 * 2**20 < rss < 4 * 2**30
    fds = r.sample("process_open_fds")
    assert fds is not None and fds >= 3
    start = r.sample("process_start_time_seconds")
    assert start is not None and abs(start - (os.stat("/proc/self").st_ctime)) < 120
