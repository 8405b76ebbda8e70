"""Training-side progress reports to the TFJob controller.

A training program calls :func:`report` as it goes (or hands :func:`keras_callback` to
``model.fit``); a daemon thread posts the latest report to the controller, which makes the
replicas' reports the TFJob's progress and spots stragglers. This module uses the standard
library only: Keras is imported when :func:`keras_callback` builds a callback, never before.

Outside a TFJob, or with reporting switched off (``TFJOB_PROGRESS_URL`` unset or empty),
every function is a cheap no-op. Nothing here raises into training code: a report that
cannot be sent is dropped, and each kind of failure is logged once, on the logger
``tfjob_controller.progress``.

Environment (the controller sets the first three in every training container):

- ``TFJOB_PROGRESS_URL``: the HTTPS URL reports are POSTed to.
- ``TFJOB_PROGRESS_TOKEN_FILE``: the projected service-account token, sent as
  ``Authorization: Bearer <token>``. The kubelet rotates it, so it is re-read when the file
  changes (looked at every 30 s at most) and after a 401.
- ``TFJOB_PROGRESS_CA_FILE``: the PEM CA bundle the server's certificate is checked against.
- ``TFJOB_PROGRESS_INTERVAL``: seconds between reports (a float, 5 by default).

The environment is read once, at the first call.

Wire format: ``POST <url>``, HTTP/1.1 over one kept-alive connection, with
``Content-Type: application/json`` and a body of at most 16 KiB: one object with only
these keys (the server refuses any other with 400):

- ``step`` (integer from 0 to 2**53, required): the training step this replica has reached.
- ``totalSteps`` (integer >= 1), ``epoch`` (integer >= 0: the epochs completed; Keras's
  0-based index of the epoch in progress), ``totalEpochs`` (integer >= 1): optional.
- ``metrics``: at most 16 entries, name -> finite number.
- ``sections``: at most 8 entries, name -> non-negative seconds: the self-timed parts of
  the last step (``{"data": 0.012, "compute": 0.081}``), for straggler detection.
- ``final`` (boolean): true on the last report of a replica whose training loop ended.

Names match ``[A-Za-z_][A-Za-z0-9_./-]{0,62}``. Entries with another name or a value that
is not a finite number (negative, for a section) are left out here, and only the first 16
metrics and 8 sections are kept, so the server has no cause to refuse a report.

The server answers 204 when it takes a report. 400, 401, 403, 404 and 413 refuse it, with
``{"error": "..."}``: logged once at WARNING; after a 401 the token is re-read and the report
tried once more; after a 403 or 404 reporting stops for 60 s. 429 and 503 come with
``Retry-After`` (seconds): nothing is sent before then, and the report is sent afterwards
unless a newer one replaced it. Any other failure (connection refused, TLS, timeout) drops
the report and backs off: 1 s, doubling up to 60 s.

Throttling: at most one report every interval. A report with ``force=True`` or
``final=True`` (an epoch's end, the end of training) is sent sooner, but at most one a
second. Reports in between are coalesced: the latest is sent when the throttle allows, so
the last step before a quiet spell is not lost. :func:`report` only hands the report to the
sending thread, so training never waits on the network; except a ``final=True`` report,
which waits (a few seconds at most) until it is sent, as the process may end right after.

With Keras (``model.fit``)::

    import tf_keras  # or keras (Keras 3)
    from tfjob_controller import progress

    model.fit(dataset, epochs=10, callbacks=[progress.keras_callback(tf_keras)])

A custom training loop::

    from tfjob_controller import progress

    timer = progress.StepTimer()
    for step in range(first_step, total_steps):
        with timer.section("data"):
            batch = next(iterator)
        with timer.section("compute"):
            loss = train_step(batch)
        # loss may stay a tensor: it is turned into a number on the sending thread,
        # and only for the reports that are sent
        progress.report(
            step + 1,
            total_steps=total_steps,
            metrics={"loss": loss},
            sections=timer.sections(),
        )
    progress.report(total_steps, total_steps=total_steps, final=True)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.client
import importlib
import json
import logging
import math
import operator
import os
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Final, ParamSpec, SupportsIndex, cast

__all__ = [
    "ENV_CA_FILE",
    "ENV_INTERVAL",
    "ENV_TOKEN_FILE",
    "ENV_URL",
    "Reporter",
    "StepTimer",
    "default_reporter",
    "keras_callback",
    "report",
]

LOG = logging.getLogger("tfjob_controller.progress")

ENV_URL: Final = "TFJOB_PROGRESS_URL"
ENV_TOKEN_FILE: Final = "TFJOB_PROGRESS_TOKEN_FILE"
ENV_CA_FILE: Final = "TFJOB_PROGRESS_CA_FILE"
ENV_INTERVAL: Final = "TFJOB_PROGRESS_INTERVAL"

DEFAULT_INTERVAL: Final = 5.0
#: The least time between two sends, forced or final ones included.
FORCED_GAP: Final = 1.0
MAX_BODY: Final = 16 * 1024
MAX_METRICS: Final = 16
MAX_SECTIONS: Final = 8
#: The server's limit for every count (reconcile.progress.wire.MAX_INT, a test checks
#: they agree): the largest integer a float64 holds exactly, so JSON readers agree.
MAX_COUNT: Final = 2**53
NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,62}")
TOKEN_CHECK_EVERY: Final = 30.0
REFUSED_PAUSE: Final = 60.0
BACKOFF_FIRST: Final = 1.0
BACKOFF_MAX: Final = 60.0
#: A Retry-After beyond this is taken as this: a confused server must not end reporting.
RETRY_AFTER_MAX: Final = 3600.0
#: Of a response body, only this much is read (the error text); more drops the connection.
RESPONSE_MAX: Final = 64 * 1024

PAUSING: Final = frozenset({403, 404})
RETRY_LATER: Final = frozenset({429, 503})

P = ParamSpec("P")


# -- the document ---------------------------------------------------------------------------


def _count(value: object, least: int) -> int | None:
    """An integer in [least, MAX_COUNT], from an int, a numpy or tensor integer, or an
    integral float; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        number = int(value)
    else:
        try:
            number = operator.index(cast(SupportsIndex, value))
        except TypeError:
            return None
    return number if least <= number <= MAX_COUNT else None


def _number(value: object) -> float | None:
    if isinstance(value, (str, bytes, bytearray)):
        return None
    try:
        # numpy scalars, 0-d tensors and Keras variables all convert; nothing else is a metric
        number = float(value)  # type: ignore[arg-type]
    except Exception:
        return None
    return number if math.isfinite(number) else None


def _named_numbers(
    entries: Mapping[Any, object] | None, limit: int, *, non_negative: bool
) -> dict[str, float]:
    kept: dict[str, float] = {}
    for name, value in (entries or {}).items():
        if len(kept) >= limit:
            break
        if not (isinstance(name, str) and NAME.fullmatch(name)):
            continue
        number = _number(value)
        if number is not None and not (non_negative and number < 0):
            kept[name] = number
    return kept


def _head(
    step: object,
    total_steps: object,
    epoch: object,
    total_epochs: object,
    final: bool,
) -> dict[str, object] | None:
    """The counts of a report, checked; None when the step is not an integer >= 0. An
    optional count that is out of range is left out rather than sink the report."""
    number = _count(step, 0)
    if number is None:
        return None
    head: dict[str, object] = {"step": number}
    for key, value, least in (
        ("totalSteps", total_steps, 1),
        ("epoch", epoch, 0),
        ("totalEpochs", total_epochs, 1),
    ):
        counted = None if value is None else _count(value, least)
        if counted is not None:
            head[key] = counted
    if final:
        head["final"] = True
    return head


def _dumps(document: Mapping[str, object]) -> bytes:
    return json.dumps(document, separators=(",", ":"), allow_nan=False).encode()


@dataclasses.dataclass(frozen=True)
class _Job:
    """A report waiting for the sender: its counts checked, its metrics and sections as
    given (a private copy), turned into numbers only if the report is sent."""

    seq: int
    head: dict[str, object]
    metrics: dict[Any, object] | None
    sections: dict[Any, object] | None
    forced: bool

    def body(self) -> bytes:
        document = dict(self.head)
        metrics = _named_numbers(self.metrics, MAX_METRICS, non_negative=False)
        sections = _named_numbers(self.sections, MAX_SECTIONS, non_negative=True)
        if metrics:
            document["metrics"] = metrics
        if sections:
            document["sections"] = sections
        body = _dumps(document)
        # cannot happen with the limits above (about 3 KiB at most); kept so a change to
        # them can never make the server refuse every report
        return body if len(body) <= MAX_BODY else _dumps(self.head)


def _copy(entries: Mapping[Any, object] | None) -> dict[Any, object] | None:
    return None if entries is None else dict(entries)


@dataclasses.dataclass(frozen=True)
class _Outcome:
    """What came of one send: an HTTP status, or a failure with no answer."""

    kind: str
    status: int | None = None
    error: str = ""
    retry_after: float | None = None

    @property
    def accepted(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _error_text(data: bytes) -> str:
    with contextlib.suppress(Exception):
        error = json.loads(data)["error"]
        if isinstance(error, str):
            return error
    return data.decode("utf-8", "replace").strip()[:200] or "(no error text)"


def _seconds(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        seconds = float(text.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, RETRY_AFTER_MAX)


_BUGS: set[str] = set()


def _bug(where: str) -> None:
    """Called in an except block: a bug here must cost reports, never the training."""
    if where not in _BUGS:
        _BUGS.add(where)
        LOG.exception("progress reporting failed in %s (a bug); reports may be lost", where)


# -- the reporter ---------------------------------------------------------------------------


class Reporter:
    """Sends one replica's progress reports to the controller, from a daemon thread.

    :meth:`report` hands over a report and returns at once; the thread sends the latest
    report as the throttle allows, over one kept-alive HTTPS connection. Thread-safe.
    """

    def __init__(
        self,
        url: str,
        token_file: str | os.PathLike[str] | None,
        ca_file: str | os.PathLike[str] | None,
        *,
        interval: float = DEFAULT_INTERVAL,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"the progress URL must be https://host[:port]/path, not {url!r}")
        if not (math.isfinite(interval) and interval >= 0):
            raise ValueError(f"interval must be a number of seconds >= 0, not {interval!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a number of seconds > 0, not {timeout!r}")
        self.url = url
        self.interval = interval
        self.timeout = timeout
        self._host = parts.hostname
        self._port = parts.port or 443
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._token_file = os.fspath(token_file) if token_file else None
        self._ca_file = os.fspath(ca_file) if ca_file else None
        self._clock = clock
        self._forced_gap = min(FORCED_GAP, interval)
        # a final report may wait for the forced gap, a stale connection, a 401 and its retry
        self._final_wait = FORCED_GAP + 3 * timeout

        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._pending: _Job | None = None
        self._submitted = 0  # seq of the latest report handed over
        self._attempted = 0  # seq of the latest report sent or given up on
        self._accepted = 0  # seq of the latest report the server took
        self._last_send = -math.inf
        self._not_before = -math.inf
        self._refused_until = -math.inf
        self._backoff = 0.0
        self._logged: set[str] = set()
        self._log_lock = threading.Lock()

        # the sender thread's own
        self._conn: http.client.HTTPSConnection | None = None
        self._tls: ssl.SSLContext | None = None
        self._token: str | None = None
        self._token_stat: tuple[int, int, int] | None = None
        self._token_checked = -math.inf

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Reporter | None:
        """The reporter the controller's environment variables describe; None when
        ``TFJOB_PROGRESS_URL`` is unset or empty. Raises ValueError for a URL that is
        not https."""
        env = os.environ if environ is None else environ
        url = env.get(ENV_URL, "").strip()
        if not url:
            return None
        return cls(
            url,
            env.get(ENV_TOKEN_FILE) or None,
            env.get(ENV_CA_FILE) or None,
            interval=_env_interval(env.get(ENV_INTERVAL)),
        )

    # -- the training side

    def report(
        self,
        step: SupportsIndex,
        *,
        total_steps: SupportsIndex | None = None,
        epoch: SupportsIndex | None = None,
        total_epochs: SupportsIndex | None = None,
        metrics: Mapping[str, object] | None = None,
        sections: Mapping[str, float] | None = None,
        final: bool = False,
        force: bool = False,
    ) -> bool:
        """Hand over a report; never raises.

        True when the report was taken: it will be sent, or replaced by a later one, as
        the throttle allows. False when it was dropped: the step is not an integer >= 0,
        the reporter is closed, or the server refused reports (403/404) less than 60 s
        ago. A ``final=True`` report is waited for (a few seconds at most): then True
        means the server took it.
        """
        try:
            head = _head(step, total_steps, epoch, total_epochs, final)
            if head is None:
                self._warn_once(
                    "step",
                    "progress report dropped: the step must be an integer >= 0, not %r",
                    step,
                )
                return False
            taken = self._submit(head, _copy(metrics), _copy(sections), force or final)
            return self._wait_final() if taken and final else taken
        except Exception:
            _bug("Reporter.report")
            return False

    def due(self, *, force: bool = False) -> bool:
        """Whether a report made now would be sent at once: a cheap check (no lock) for a
        caller that would rather not gather metrics for a report the throttle holds back."""
        now = self._clock()
        return not self._closed and now >= self._refused_until and now >= self._ready_at(force)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the reports handed over so far have been sent or given up on (at
        most ``timeout`` seconds); True when the server took the latest of them (or there
        was none). A report the throttle holds back is waited for, not hurried."""
        try:
            self._check_fork()
            with self._cond:
                target = self._submitted
                # the sender re-reads the clock when woken: a test's clock may have moved
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._attempted >= target or self._closed, timeout)
                return self._accepted >= target
        except Exception:
            _bug("Reporter.flush")
            return False

    def close(self, timeout: float | None = 1.0) -> None:
        """Stop the sender, dropping a report it has not sent; later reports are no-ops."""
        with self._cond:
            self._closed = True
            self._pending = None
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            self._close_conn()
        elif thread is not threading.current_thread():
            thread.join(timeout)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _check_fork(self) -> None:
        # a forked child (a data-loading worker) has no sender thread, and shares the
        # parent's socket and maybe a held lock: it starts afresh
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._cond = threading.Condition()
            self._log_lock = threading.Lock()
            self._thread = None
            self._conn = None
            self._tls = None

    def _submit(
        self,
        head: dict[str, object],
        metrics: dict[Any, object] | None,
        sections: dict[Any, object] | None,
        forced: bool,
    ) -> bool:
        self._check_fork()
        with self._cond:
            if self._closed or self._clock() < self._refused_until:
                return False
            old = self._pending
            # an epoch's end keeps its place in the queue when a batch report overtakes it
            forced = forced or (old is not None and old.forced)
            self._submitted += 1
            self._pending = _Job(self._submitted, head, metrics, sections, forced)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="tfjob-progress", daemon=True
                )
                self._thread.start()
            # the sender, when waiting on a report, waits until the same moment for this one
            if old is None or (forced and not old.forced):
                self._cond.notify_all()
            return True

    def _wait_final(self) -> bool:
        deadline = time.monotonic() + self._final_wait
        while True:
            if self.flush(max(0.0, deadline - time.monotonic())):
                return True
            with self._cond:
                waiting = self._pending is not None and not self._closed
            # a 429/503 put it back: it goes again once Retry-After allows
            if not waiting or time.monotonic() >= deadline:
                return False

    def _ready_at(self, forced: bool) -> float:
        gap = self._forced_gap if forced else self.interval
        return max(self._not_before, self._last_send + gap)

    # -- the sender thread

    def _run(self) -> None:
        try:
            while (job := self._take()) is not None:
                try:
                    outcome = self._deliver(job)
                except Exception:
                    _bug("the progress sender")
                    outcome = _Outcome(kind="bug")
                self._settle(job, outcome)
        except Exception:
            _bug("the progress sender's loop")
        finally:
            self._close_conn()

    def _take(self) -> _Job | None:
        with self._cond:
            while not self._closed:
                job = self._pending
                if job is None:
                    self._cond.wait()
                    continue
                now = self._clock()
                wait = self._ready_at(job.forced) - now
                if wait <= 0:
                    self._pending = None
                    self._last_send = now
                    return job
                self._cond.wait(wait)
            return None

    def _settle(self, job: _Job, outcome: _Outcome) -> None:
        now = self._clock()
        with self._cond:
            wait, done = self._apply(job, outcome, now)
        try:
            self._log(outcome, wait)
        except Exception:
            _bug("logging a report's outcome")
        # only now, so that whoever waits in flush() finds the outcome logged
        with self._cond:
            self._attempted = max(self._attempted, done)
            self._cond.notify_all()

    def _apply(self, job: _Job, outcome: _Outcome, now: float) -> tuple[float, int]:
        """Take in what came of sending job, under the lock: the seconds until the next
        send may go, and the seq of the latest report now sent or given up on."""
        status = outcome.status
        if outcome.accepted:
            self._accepted = job.seq
            self._backoff = 0.0
            return 0.0, job.seq
        if status in RETRY_LATER:
            wait = outcome.retry_after if outcome.retry_after is not None else self._grow()
            self._not_before = now + wait
            if self._pending is None:
                self._submitted += 1
                self._pending = dataclasses.replace(job, seq=self._submitted)
            return wait, job.seq
        if status in PAUSING:
            self._refused_until = now + REFUSED_PAUSE
            self._pending = None
            return REFUSED_PAUSE, self._submitted
        if status is None or status >= 500:
            wait = self._grow()
            self._not_before = now + wait
            return wait, job.seq
        self._backoff = 0.0
        return 0.0, job.seq

    def _grow(self) -> float:
        self._backoff = min(BACKOFF_MAX, self._backoff * 2) if self._backoff else BACKOFF_FIRST
        return self._backoff

    def _log(self, outcome: _Outcome, wait: float) -> None:
        status = outcome.status
        if outcome.accepted:
            with self._log_lock:
                failed = bool(self._logged - {"step"})
                self._logged.clear()
            if failed:
                LOG.info("progress reports are taken again")
        elif status in RETRY_LATER:
            self._info_once(
                outcome.kind,
                "progress server busy (HTTP %s): the next report in %.0f s",
                status,
                wait,
            )
        elif status is not None and status < 500:
            paused = f"; no reports for {wait:.0f} s" if status in PAUSING else ""
            self._warn_once(
                outcome.kind,
                "progress report refused: HTTP %s: %s%s",
                status,
                outcome.error,
                paused,
            )
        elif outcome.kind != "bug":
            failure = outcome.error if status is None else f"HTTP {status}: {outcome.error}"
            self._warn_once(
                outcome.kind, "progress report dropped: %s; the next try in %.0f s", failure, wait
            )

    def _warn_once(self, kind: str, message: str, *args: object) -> None:
        self._log_once(logging.WARNING, kind, message, *args)

    def _info_once(self, kind: str, message: str, *args: object) -> None:
        self._log_once(logging.INFO, kind, message, *args)

    def _log_once(self, level: int, kind: str, message: str, *args: object) -> None:
        """Once per kind of failure until a report is taken again, not once per report."""
        with self._log_lock:
            first = kind not in self._logged
            self._logged.add(kind)
        if first:
            LOG.log(level, message, *args)

    def _deliver(self, job: _Job) -> _Outcome:
        body = job.body()
        try:
            status, data, retry_after = self._post(body, self._bearer(renew=False))
            if status == 401 and self._token_file is not None:
                # the kubelet may have rotated the token since it was read
                status, data, retry_after = self._post(body, self._bearer(renew=True))
        except (OSError, http.client.HTTPException) as exc:
            self._close_conn()
            if isinstance(exc, ssl.SSLCertVerificationError):
                self._tls = None  # a renewed CA bundle is read for the next try
            return _Outcome(kind=type(exc).__name__, error=f"{type(exc).__name__}: {exc}")
        error = "" if 200 <= status < 300 else _error_text(data)
        return _Outcome(
            kind=f"HTTP {status}", status=status, error=error, retry_after=_seconds(retry_after)
        )

    def _bearer(self, *, renew: bool) -> str | None:
        if self._token_file is None:
            return None
        now = self._clock()
        if renew or self._token is None or now - self._token_checked >= TOKEN_CHECK_EVERY:
            self._token_checked = now
            st = os.stat(self._token_file)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if renew or self._token is None or stamp != self._token_stat:
                with open(self._token_file, encoding="utf-8") as f:
                    self._token = f.read().strip()
                self._token_stat = stamp
        return self._token

    def _post(self, body: bytes, token: str | None) -> tuple[int, bytes, str | None]:
        reused = self._conn is not None
        try:
            return self._exchange(body, token)
        except TimeoutError:
            raise
        except (OSError, http.client.HTTPException):
            if not reused:
                raise
            # the server may close a kept-alive connection whenever it is idle: once more,
            # on a new one (a report is safe to send twice)
            self._close_conn()
            return self._exchange(body, token)

    def _exchange(self, body: bytes, token: str | None) -> tuple[int, bytes, str | None]:
        conn = self._conn or self._connect()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request("POST", self._target, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(RESPONSE_MAX)
        if response.will_close or not response.isclosed():
            self._close_conn()
        return response.status, data, response.getheader("Retry-After")

    def _connect(self) -> http.client.HTTPSConnection:
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=self._ca_file)
        conn = http.client.HTTPSConnection(
            self._host, self._port, timeout=self.timeout, context=self._tls
        )
        try:
            conn.connect()
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


def _env_interval(text: str | None) -> float:
    if text is None or not text.strip():
        return DEFAULT_INTERVAL
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and seconds >= 0:
        return seconds
    LOG.warning(
        "%s=%r is not a number of seconds >= 0; using %s", ENV_INTERVAL, text, DEFAULT_INTERVAL
    )
    return DEFAULT_INTERVAL


# -- the process-wide reporter --------------------------------------------------------------


class _Default:
    """The process's reporter, made from the environment at the first call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = False
        self._reporter: Reporter | None = None

    def get(self) -> Reporter | None:
        if self._ready:
            return self._reporter
        with self._lock:
            if not self._ready:
                try:
                    self._reporter = Reporter.from_env()
                except Exception as exc:
                    LOG.warning("progress reporting is off: %s", exc)
                self._ready = True
        return self._reporter


_DEFAULT = _Default()


def default_reporter() -> Reporter | None:
    """The process-wide reporter, made from the environment at the first call; None when
    reporting is off (``TFJOB_PROGRESS_URL`` unset or empty, or not usable)."""
    try:
        return _DEFAULT.get()
    except Exception:
        _bug("default_reporter")
        return None


def report(
    step: SupportsIndex,
    *,
    total_steps: SupportsIndex | None = None,
    epoch: SupportsIndex | None = None,
    total_epochs: SupportsIndex | None = None,
    metrics: Mapping[str, object] | None = None,
    sections: Mapping[str, float] | None = None,
    final: bool = False,
    force: bool = False,
) -> bool:
    """Report this replica's progress (see the module's docstring); never raises.

    ``step``: the step reached (global step, optimizer iterations); ``epoch``: the epochs
    completed (during the first epoch 0, after it 1); ``metrics``: name -> number (tensors
    too); ``sections``: name -> seconds the parts of the last step took
    (:class:`StepTimer`); ``force``: not held back
    by the interval (an epoch's end); ``final``: the training loop ended (sent like force,
    and waited for). Returns what :meth:`Reporter.report` does; False when reporting is off.
    """
    reporter = default_reporter()
    if reporter is None:
        return False
    return reporter.report(
        step,
        total_steps=total_steps,
        epoch=epoch,
        total_epochs=total_epochs,
        metrics=metrics,
        sections=sections,
        final=final,
        force=force,
    )


# -- timing the parts of a step -------------------------------------------------------------


class StepTimer:
    """Adds up how long the named parts of a training step take, for ``sections``.

    ``with timer.section("data"): ...`` times one part (a part timed twice adds up);
    :meth:`sections` returns the totals and starts afresh. For one thread.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._totals: dict[str, float] = {}

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        start = self._clock()
        try:
            yield
        finally:
            self._totals[name] = self._totals.get(name, 0.0) + (self._clock() - start)

    def sections(self) -> dict[str, float]:
        totals, self._totals = self._totals, {}
        return totals


# -- Keras ----------------------------------------------------------------------------------


def _replicas_in_sync(model: object) -> int:
    try:
        n = model.distribute_strategy.num_replicas_in_sync  # type: ignore[attr-defined]
        return int(n)
    except Exception:
        return 1


def _guarded(hook: Callable[P, None]) -> Callable[P, None]:
    """A callback hook that never raises into ``model.fit``."""

    @functools.wraps(hook)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            hook(*args, **kwargs)
        except Exception:
            _bug(f"the Keras callback's {hook.__name__}")

    return guarded


Logs = Mapping[str, object] | None


class _ProgressCallback:
    """The reporting half of the Keras callback; :func:`keras_callback` mixes it into the
    given Keras's ``callbacks.Callback``."""

    params: Any
    model: Any

    def __init__(
        self, total_steps: int | None, every_n_batches: int, reporter: Reporter | None
    ) -> None:
        super().__init__()
        # Keras then passes the logs as they are, tensors and all, rather than copying them
        # to numpy after every batch; the few that are sent become numbers on the sender
        # (set here, not on the class: tf_keras's Callback.__init__ sets it False)
        self._supports_tf_logs = True
        self._total_steps = total_steps
        self._every = every_n_batches
        self._reporter_given = reporter
        self._batches = 0
        self._first_step = 0
        self._epoch: int | None = None
        self._held: Logs = None
        self._batch_metrics = True

    def _reporter(self) -> Reporter | None:
        given = self._reporter_given
        return given if given is not None else default_reporter()

    def _iterations(self) -> int | None:
        try:
            iterations = self.model.optimizer.iterations
            numpy = getattr(iterations, "numpy", None)
            number = int(numpy() if callable(numpy) else iterations)
        except Exception:
            return None
        return number if number >= 0 else None

    def _step(self) -> int:
        counted = self._first_step + self._batches
        iterations = self._iterations()
        # the larger: with JAX, Keras 3 copies iterations back to the variable only at an
        # epoch's end; with steps_per_execution, a batch hook covers several steps
        return counted if iterations is None else max(iterations, counted)

    def _totals(self) -> tuple[int | None, int | None]:
        params = self.params if isinstance(self.params, Mapping) else {}
        epochs = _count(params.get("epochs"), 1)
        steps = _count(params.get("steps"), 1)
        total = self._total_steps
        if total is None and epochs is not None and steps is not None:
            total = steps * epochs
        return total, epochs

    def _send(
        self, reporter: Reporter, logs: Logs, *, force: bool = False, final: bool = False
    ) -> None:
        total_steps, total_epochs = self._totals()
        reporter.report(
            self._step(),
            total_steps=total_steps,
            epoch=self._epoch,
            total_epochs=total_epochs,
            metrics=logs,
            force=force,
            final=final,
        )

    def _implements_train_batch_hooks(self) -> bool:
        # tf_keras asks (and ParameterServerStrategy refuses callbacks that say yes)
        return self._every > 0

    @_guarded
    def on_train_begin(self, logs: Logs = None) -> None:
        self._batches = 0
        self._held = None
        self._first_step = self._iterations() or 0
        # Under a strategy with several replicas, tf_keras's per-batch logs are not the
        # mean loss (with two MultiWorkerMirroredStrategy workers, twice it), and the
        # model's metrics can only be read as a collective, which a throttled callback
        # cannot join in step. Batches then report their step alone; the epoch's logs,
        # which are right, carry the metrics.
        self._batch_metrics = _replicas_in_sync(self.model) <= 1

    @_guarded
    def on_epoch_begin(self, epoch: int, logs: Logs = None) -> None:
        self._epoch = _count(epoch, 0)

    @_guarded
    def on_train_batch_end(self, batch: int, logs: Logs = None) -> None:
        self._batches += 1
        if not self._every or self._batches % self._every:
            return
        reporter = self._reporter()
        if reporter is None:
            return
        if not reporter.due():
            self._held = logs if logs is not None and self._batch_metrics else {}
            return
        self._held = None
        self._send(reporter, logs if self._batch_metrics else None)

    @_guarded
    def on_test_begin(self, logs: Logs = None) -> None:
        # validation inside fit is a quiet spell for training steps: the batch the throttle
        # held back last is handed over now, to go out when the interval allows
        held, self._held = self._held, None
        reporter = self._reporter()
        if held is not None and reporter is not None:
            self._send(reporter, held)

    @_guarded
    def on_epoch_end(self, epoch: int, logs: Logs = None) -> None:
        self._held = None
        # the epochs completed: Keras counts the one that just ended from 0
        done = _count(epoch, 0)
        self._epoch = None if done is None else done + 1
        reporter = self._reporter()
        if reporter is not None:
            self._send(reporter, logs, force=True)

    @_guarded
    def on_train_end(self, logs: Logs = None) -> None:
        self._held = None
        reporter = self._reporter()
        if reporter is not None:
            self._send(reporter, logs, final=True)


@functools.cache
def _callback_class(base: type) -> type:
    return type(
        "ProgressCallback",
        (_ProgressCallback, base),
        {"__module__": __name__, "__doc__": "Reports training progress to the TFJob controller."},
    )


def _import_keras() -> Any:
    for name in ("tf_keras", "keras"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("keras_callback needs tf_keras or keras (or pass the keras module)")


def keras_callback(
    keras: Any = None,
    *,
    total_steps: int | None = None,
    every_n_batches: int = 1,
    reporter: Reporter | None = None,
) -> Any:
    """A ``keras.callbacks.Callback`` that reports ``model.fit``'s progress.

    ``keras``: the Keras module whose ``fit`` runs: ``tf_keras`` (Keras 2) or ``keras``
    (Keras 3); by default ``tf_keras`` if it imports, else ``keras``. The callback reports
    after a batch (every ``every_n_batches``-th, when the throttle lets a report through):
    the optimizer's ``iterations`` as the step, the batch logs as metrics; at an epoch's end
    (forced, with the epoch's logs, ``val_*`` included); and at the end of training (final).
    ``total_steps`` defaults to ``params["steps"] * params["epochs"]``; ``reporter`` to the
    process-wide one (with reporting off, the callback does nothing). ``every_n_batches=0``
    leaves the batches out: ParameterServerStrategy's ``fit`` refuses callbacks with batch
    hooks, so there epochs report (on the chief, the coordinator, which alone runs them).
    """
    if isinstance(every_n_batches, bool) or not isinstance(every_n_batches, int):
        raise TypeError(f"every_n_batches must be an int, not {every_n_batches!r}")
    if every_n_batches < 0:
        raise ValueError(f"every_n_batches must be >= 0, not {every_n_batches}")
    module = keras if keras is not None else _import_keras()
    return _callback_class(module.callbacks.Callback)(total_steps, every_n_batches, reporter)
