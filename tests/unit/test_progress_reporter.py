"""tfjob_controller.progress, the training-side reporter, against a real local HTTPS server
(ThreadingHTTPServer over TLS, its certificates made here) with a fake clock: nothing waits
on a fixed sleep: a test waits on flush(), with a timeout, and moves the clock itself."""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hack.cluster.pki import make_pki
from tfjob_controller import progress
from tfjob_controller.progress import Reporter, StepTimer, keras_callback

REPO = Path(__file__).resolve().parents[2]
PATH = "/v1/namespaces/ns/tfjobs/mnist/progress"
WAIT = 5.0  # the most a test waits for anything; it never waits that long when all is well
LOGGER = "tfjob_controller.progress"


# -- certificates ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The local cluster's PKI, twice: its CA and its apiserver's certificate (for
    127.0.0.1 and localhost), and another CA's certificate, which must not verify."""
    good, bad = tmp_path_factory.mktemp("pki"), tmp_path_factory.mktemp("other-pki")
    make_pki(good)
    make_pki(bad)
    return {
        "ca": good / "ca.crt",
        "cert": good / "apiserver.crt",
        "key": good / "apiserver.key",
        "other_cert": bad / "apiserver.crt",
        "other_key": bad / "apiserver.key",
    }


# -- the server -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def token(self) -> str:
        return self.headers.get("Authorization", "").removeprefix("Bearer ")


@dataclass(frozen=True)
class Answer:
    status: int = 204
    error: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    #: close the connection after answering, without saying so (an idle timeout)
    hang_up: bool = False


Script = Callable[[Seen], Answer]


@dataclass
class Recorder:
    """What the server saw, and what it answers: the scripted answers first, then 204."""

    seen: list[Seen] = field(default_factory=list)
    script: list[Answer | Script] = field(default_factory=list)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, seen: Seen) -> Answer:
        with self.lock:
            self.seen.append(seen)
            step = self.script.pop(0) if self.script else Answer()
        return step(seen) if callable(step) else step

    def steps(self) -> list[int]:
        with self.lock:
            return [s.body["step"] for s in self.seen]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = WAIT
    server: TLSServer

    def setup(self) -> None:
        self.request.do_handshake()
        super().setup()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        seen = Seen(self.path, dict(self.headers.items()), json.loads(body))
        answer = self.server.recorder.take(seen)
        self.send_response(answer.status)
        for name, value in answer.headers:
            self.send_header(name, value)
        if answer.status != 204:
            payload = json.dumps({"error": answer.error}).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        else:
            self.end_headers()
        if answer.hang_up:
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


class TLSServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cert: Path, key: Path) -> None:
        self.recorder = Recorder()
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert, key)
        super().__init__(("127.0.0.1", 0), Handler)

    def server_bind(self) -> None:
        # HTTPServer's own looks the host's name up, which can take long with no DNS
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "localhost", self.server_address[1]

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        with self.recorder.lock:
            self.recorder.connections += 1
        # the handshake happens on the handler's thread, so a failing one blocks nothing
        wrapped = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a failed handshake or a client gone: expected in these tests

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}{PATH}"


def start(cert: Path, key: Path) -> TLSServer:
    server = TLSServer(cert, key)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def server(pki: dict[str, Path]) -> Iterator[TLSServer]:
    srv = start(pki["cert"], pki["key"])
    yield srv
    srv.shutdown()
    srv.server_close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("token-1\n")
    return path


@pytest.fixture
def make_reporter(
    pki: dict[str, Path], token_file: Path, clock: Clock
) -> Iterator[Callable[..., Reporter]]:
    made: list[Reporter] = []

    def make(url: str, **kwargs: Any) -> Reporter:
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("timeout", 2.0)
        reporter = Reporter(url, token_file, pki["ca"], **kwargs)
        made.append(reporter)
        return reporter

    yield make
    for reporter in made:
        reporter.close()


@pytest.fixture
def reporter(server: TLSServer, make_reporter: Callable[..., Reporter]) -> Reporter:
    return make_reporter(server.url)


@pytest.fixture
def fresh_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process-wide reporter not yet made, closed afterwards."""
    holder = progress._Default()
    monkeypatch.setattr(progress, "_DEFAULT", holder)
    yield
    made = holder.get() if holder._ready else None
    if made is not None:
        made.close()


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The reporter's warnings."""
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def senders() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "tfjob-progress"}


# -- off --------------------------------------------------------------------------------------


def test_without_the_environment_every_function_is_a_no_op(
    monkeypatch: pytest.MonkeyPatch, fresh_default: None
) -> None:
    for name in (progress.ENV_URL, progress.ENV_TOKEN_FILE, progress.ENV_CA_FILE):
        monkeypatch.delenv(name, raising=False)
    before = senders()
    assert progress.report(1, metrics={"loss": 1.0}) is False
    assert progress.report(2, final=True) is False
    assert progress.default_reporter() is None
    callback = keras_callback(fake_keras())
    callback.set_model(FakeModel())
    callback.on_train_begin()
    callback.on_train_batch_end(0, {"loss": 1.0})
    callback.on_epoch_end(0, {"loss": 1.0})
    callback.on_train_end({})
    assert senders() - before == set()


def test_an_empty_url_is_off_too(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Reporter.from_env({progress.ENV_URL: "  "}) is None
    with pytest.raises(ValueError, match="https"):
        Reporter.from_env({progress.ENV_URL: "http://insecure/progress"})


def test_the_module_imports_nothing_outside_the_standard_library() -> None:
    def top_level_modules(statement: str) -> set[str]:
        code = f"{statement}; import json, sys; print(json.dumps(sorted(sys.modules)))"
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return {name.split(".")[0] for name in json.loads(out)}

    imported = top_level_modules("import tfjob_controller.progress")
    baseline = top_level_modules("pass")
    assert imported - baseline - set(sys.stdlib_module_names) == {"tfjob_controller"}


def test_the_environment_makes_the_process_wide_reporter(
    server: TLSServer,
    pki: dict[str, Path],
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_default: None,
) -> None:
    monkeypatch.setenv(progress.ENV_URL, server.url)
    monkeypatch.setenv(progress.ENV_TOKEN_FILE, str(token_file))
    monkeypatch.setenv(progress.ENV_CA_FILE, str(pki["ca"]))
    monkeypatch.setenv(progress.ENV_INTERVAL, "0.25")
    assert progress.report(7, total_steps=100, metrics={"loss": 0.5}) is True
    made = progress.default_reporter()
    assert made is not None and made.interval == 0.25
    assert made.flush(WAIT)
    assert server.recorder.steps() == [7]


def test_a_bad_interval_falls_back_to_the_default(caplog: pytest.LogCaptureFixture) -> None:
    env = {progress.ENV_URL: "https://x/p", progress.ENV_INTERVAL: "soon"}
    made = Reporter.from_env(env)
    assert made is not None and made.interval == progress.DEFAULT_INTERVAL
    assert "TFJOB_PROGRESS_INTERVAL" in caplog.text


# -- the request ------------------------------------------------------------------------------


def test_a_report_arrives_with_the_right_headers_and_body(
    server: TLSServer, reporter: Reporter
) -> None:
    assert reporter.report(
        12,
        total_steps=1000,
        epoch=0,
        total_epochs=4,
        metrics={"loss": 0.25, "accuracy": 1},
        sections={"data": 0.012, "compute": 0.081},
    )
    assert reporter.flush(WAIT)
    [seen] = server.recorder.seen
    assert seen.path == PATH
    assert seen.headers["Authorization"] == "Bearer token-1"
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.body == {
        "step": 12,
        "totalSteps": 1000,
        "epoch": 0,
        "totalEpochs": 4,
        "metrics": {"loss": 0.25, "accuracy": 1.0},
        "sections": {"data": 0.012, "compute": 0.081},
    }
    assert int(seen.headers["Content-Length"]) == len(json.dumps(seen.body, separators=(",", ":")))


def test_reports_share_one_kept_alive_connection(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    for step in range(5):
        assert reporter.report(step)
        assert reporter.flush(WAIT)
        clock.advance(reporter.interval)
    assert server.recorder.steps() == [0, 1, 2, 3, 4]
    assert server.recorder.connections == 1


def test_connection_close_means_a_new_connection(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    server.recorder.script = [Answer(headers=(("Connection", "close"),))]
    for step in range(3):
        assert reporter.report(step)
        assert reporter.flush(WAIT)
        clock.advance(reporter.interval)
    assert server.recorder.steps() == [0, 1, 2]
    assert server.recorder.connections == 2


def test_a_connection_the_server_dropped_while_idle_costs_no_report(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    server.recorder.script = [Answer(hang_up=True)]
    for step in range(3):
        assert reporter.report(step)
        assert reporter.flush(WAIT)
        clock.advance(reporter.interval)
    assert server.recorder.steps() == [0, 1, 2]
    assert server.recorder.connections == 2


def test_metrics_and_sections_are_cleaned_and_capped(server: TLSServer, reporter: Reporter) -> None:
    metrics: dict[str, object] = {
        "loss": float("nan"),
        "inf": float("inf"),
        "1bad": 1.0,
        "has space": 1.0,
        "x" * 64: 1.0,
        "word": "1.5",
        "none": None,
        "ok/name.with-dash_": 3,
        "flag": True,
    }
    metrics.update({f"m{i}": float(i) for i in range(20)})
    given = dict(metrics)
    sections = {"data": 0.5, "neg": -0.1, "nan": float("nan")}
    sections.update({f"s{i}": 0.25 for i in range(10)})
    assert reporter.report(3, metrics=metrics, sections=sections)
    assert reporter.flush(WAIT)
    [seen] = server.recorder.seen
    kept = seen.body["metrics"]
    assert list(kept) == ["ok/name.with-dash_", "flag", *[f"m{i}" for i in range(14)]]
    assert kept["ok/name.with-dash_"] == 3.0 and kept["flag"] == 1.0
    assert list(seen.body["sections"]) == ["data", *[f"s{i}" for i in range(7)]]
    assert metrics == given  # the caller's dict untouched


def test_counts_out_of_range_are_left_out_and_a_bad_step_drops_the_report(
    server: TLSServer, reporter: Reporter, caplog: pytest.LogCaptureFixture
) -> None:
    assert reporter.report(-1) is False
    assert reporter.report(1.5) is False  # type: ignore[arg-type]
    assert reporter.report("3") is False  # type: ignore[arg-type]
    assert len([r for r in records(caplog) if "step" in r.getMessage()]) == 1
    assert reporter.report(4.0, total_steps=0, epoch=-1, total_epochs=True)  # type: ignore[arg-type]
    assert reporter.flush(WAIT)
    assert [s.body for s in server.recorder.seen] == [{"step": 4}]


# -- throttling -----------------------------------------------------------------------------


def test_reports_inside_the_interval_are_coalesced_into_the_latest(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    assert reporter.report(1)
    assert reporter.flush(WAIT)
    assert not reporter.due()
    for step in (2, 3, 4):
        assert reporter.report(step, metrics={"loss": float(step)})
    clock.advance(reporter.interval - 0.5)
    assert not reporter.due()
    clock.advance(0.5)
    assert reporter.due()
    assert reporter.flush(WAIT)
    assert server.recorder.steps() == [1, 4]
    assert server.recorder.seen[-1].body["metrics"] == {"loss": 4.0}


def test_force_and_final_skip_the_interval_but_not_the_second(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    assert reporter.report(1)
    assert reporter.flush(WAIT)
    clock.advance(0.5)
    assert not reporter.due(force=True)
    assert reporter.report(2, epoch=0, force=True)
    clock.advance(0.5)
    assert reporter.due(force=True) and not reporter.due()
    assert reporter.flush(WAIT)
    clock.advance(1.0)
    assert reporter.report(3, final=True) is True  # waited for
    assert [s.body for s in server.recorder.seen] == [
        {"step": 1},
        {"step": 2, "epoch": 0},
        {"step": 3, "final": True},
    ]


def test_a_batch_report_overtaking_an_epoch_end_keeps_its_turn(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    assert reporter.report(1)
    assert reporter.flush(WAIT)
    assert reporter.report(2, force=True)
    assert reporter.report(3)
    clock.advance(1.0)
    assert reporter.flush(WAIT)
    assert server.recorder.steps() == [1, 3]


# -- the server's answers ---------------------------------------------------------------------


def test_a_401_rereads_the_token_and_tries_once_more(
    server: TLSServer, reporter: Reporter, token_file: Path
) -> None:
    def rotate(seen: Seen) -> Answer:
        token_file.write_text("token-2-rotated\n")
        return Answer(401, "token expired")

    server.recorder.script = [rotate]
    assert reporter.report(5)
    assert reporter.flush(WAIT)
    assert [s.token for s in server.recorder.seen] == ["token-1", "token-2-rotated"]
    assert server.recorder.steps() == [5, 5]


def test_a_second_401_drops_the_report_with_one_warning(
    server: TLSServer, reporter: Reporter, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    server.recorder.script = [Answer(401, "bad token"), Answer(401, "bad token")] * 2
    assert reporter.report(1)
    assert not reporter.flush(WAIT)
    clock.advance(reporter.interval)
    assert reporter.report(2)
    assert not reporter.flush(WAIT)
    assert server.recorder.steps() == [1, 1, 2, 2]
    [warning] = records(caplog)
    assert warning.levelno == logging.WARNING
    assert "401" in warning.getMessage() and "bad token" in warning.getMessage()


def test_a_rotated_token_is_picked_up_within_30_seconds(
    server: TLSServer, reporter: Reporter, clock: Clock, token_file: Path
) -> None:
    assert reporter.report(1)
    assert reporter.flush(WAIT)
    token_file.write_text("token-22\n")
    clock.advance(10)
    assert reporter.report(2)
    assert reporter.flush(WAIT)
    clock.advance(progress.TOKEN_CHECK_EVERY)
    assert reporter.report(3)
    assert reporter.flush(WAIT)
    assert [s.token for s in server.recorder.seen] == ["token-1", "token-1", "token-22"]


def test_a_refused_report_is_logged_with_the_servers_reason(
    server: TLSServer, reporter: Reporter, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    server.recorder.script = [Answer(400, "unknown field 'lr'"), Answer(400, "unknown field")]
    for step in (1, 2, 3):
        reporter.report(step)
        reporter.flush(WAIT)
        clock.advance(reporter.interval)
    assert server.recorder.steps() == [1, 2, 3]
    [warning] = records(caplog)
    assert "400" in warning.getMessage() and "unknown field 'lr'" in warning.getMessage()


@pytest.mark.parametrize("status", [403, 404])
def test_after_a_403_or_404_reporting_stops_for_a_minute(
    server: TLSServer, reporter: Reporter, clock: Clock, status: int
) -> None:
    server.recorder.script = [Answer(status, "no such tfjob")]
    assert reporter.report(1)
    assert not reporter.flush(WAIT)
    clock.advance(progress.REFUSED_PAUSE - 1)
    assert reporter.report(2) is False
    assert reporter.report(3, final=True) is False
    clock.advance(1)
    assert reporter.report(4)
    assert reporter.flush(WAIT)
    assert server.recorder.steps() == [1, 4]


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured_and_the_report_then_sent(
    server: TLSServer, reporter: Reporter, clock: Clock, status: int
) -> None:
    server.recorder.script = [Answer(status, "busy", headers=(("Retry-After", "12"),))]
    assert reporter.report(1)
    assert not reporter.flush(WAIT)
    clock.advance(reporter.interval)
    assert not reporter.due() and not reporter.due(force=True)
    clock.advance(11.5 - reporter.interval)
    assert not reporter.due(force=True)
    clock.advance(0.5)
    assert reporter.due()
    assert reporter.flush(WAIT)
    assert server.recorder.steps() == [1, 1]


def test_a_newer_report_replaces_one_put_back_by_retry_after(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    server.recorder.script = [Answer(429, "busy", headers=(("Retry-After", "3"),))]
    assert reporter.report(1)
    assert not reporter.flush(WAIT)
    assert reporter.report(2)
    clock.advance(reporter.interval)
    assert reporter.flush(WAIT)
    assert server.recorder.steps() == [1, 2]


# -- failures with no answer --------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_down_costs_no_exception_backs_off_and_logs_once(
    make_reporter: Callable[..., Reporter], clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = make_reporter(f"https://127.0.0.1:{closed_port()}{PATH}", interval=0.0)
    assert reporter.report(1)
    assert not reporter.flush(WAIT)
    for backoff in (1.0, 2.0, 4.0):
        assert reporter.report(2)
        clock.advance(backoff - 0.25)
        assert not reporter.due()
        clock.advance(0.25)
        assert reporter.due()
        assert not reporter.flush(WAIT)
    [warning] = records(caplog)
    assert warning.levelno == logging.WARNING
    assert "ConnectionRefusedError" in warning.getMessage()


def test_backoff_ends_at_a_minute(make_reporter: Callable[..., Reporter], clock: Clock) -> None:
    reporter = make_reporter(f"https://127.0.0.1:{closed_port()}{PATH}", interval=0.0)
    for _ in range(8):
        assert reporter.report(1)
        assert not reporter.flush(WAIT)
        clock.advance(progress.BACKOFF_MAX)
    assert reporter.report(1)
    assert not reporter.flush(WAIT)
    clock.advance(progress.BACKOFF_MAX - 0.5)
    assert not reporter.due()
    clock.advance(0.5)
    assert reporter.due()


def test_a_certificate_from_another_ca_is_refused_and_logged(
    pki: dict[str, Path],
    make_reporter: Callable[..., Reporter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    impostor = start(pki["other_cert"], pki["other_key"])
    try:
        reporter = make_reporter(impostor.url)
        assert reporter.report(1)
        assert not reporter.flush(WAIT)
        assert impostor.recorder.seen == []
        [warning] = records(caplog)
        assert "certificate verify failed" in warning.getMessage()
    finally:
        impostor.shutdown()
        impostor.server_close()


def test_a_missing_token_file_drops_the_report_with_a_warning(
    server: TLSServer,
    make_reporter: Callable[..., Reporter],
    token_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token_file.unlink()
    reporter = make_reporter(server.url)
    assert reporter.report(1)
    assert not reporter.flush(WAIT)
    assert server.recorder.seen == []
    assert "FileNotFoundError" in caplog.text


# -- threads ------------------------------------------------------------------------------------


def test_reports_from_many_threads_raise_nothing_and_the_last_wins(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    go = threading.Barrier(8)
    results: list[list[bool]] = [[] for _ in range(8)]

    def hammer(n: int) -> None:
        go.wait(WAIT)
        results[n] = [reporter.report(n * 1000 + i, metrics={"i": i}) for i in range(200)]

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert [len(r) for r in results] == [200] * 8 and all(all(r) for r in results)
    assert reporter.report(10**6)
    clock.advance(reporter.interval)
    assert reporter.flush(WAIT)
    # the first report taken went at once (unless the sender started late); every later
    # one waited for the interval, coalesced into the latest
    steps = server.recorder.steps()
    assert len(steps) in (1, 2) and steps[-1] == 10**6


def test_a_closed_reporter_takes_no_more_reports(server: TLSServer, reporter: Reporter) -> None:
    assert reporter.report(1)
    assert reporter.flush(WAIT)
    reporter.close()
    assert reporter.report(2) is False
    assert not reporter.due()


# -- StepTimer --------------------------------------------------------------------------------


def test_the_step_timer_adds_up_sections_and_starts_afresh(clock: Clock) -> None:
    timer = StepTimer(clock)
    with timer.section("data"):
        clock.advance(0.25)
    with timer.section("compute"):
        clock.advance(1.0)
    with timer.section("data"):
        clock.advance(0.5)
    assert timer.sections() == {"data": 0.75, "compute": 1.0}
    assert timer.sections() == {}
    with pytest.raises(RuntimeError), timer.section("data"):
        clock.advance(2.0)
        raise RuntimeError
    assert timer.sections() == {"data": 2.0}


# -- Keras ----------------------------------------------------------------------------------


class FakeCallback:
    """The part of keras.callbacks.Callback the callback relies on."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.model: Any = None
        self._supports_tf_logs = False  # as tf_keras's own __init__ does

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def set_model(self, model: Any) -> None:
        self.model = model

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        raise AssertionError("the base's hook must be overridden")


def fake_keras() -> Any:
    return types.SimpleNamespace(callbacks=types.SimpleNamespace(Callback=FakeCallback))


class Iterations:
    """Like a tf.Variable or a Keras 3 Variable: converts through numpy()."""

    def __init__(self, value: int) -> None:
        self.value = value

    def numpy(self) -> int:
        return self.value


class FakeModel:
    def __init__(self, iterations: int = 0) -> None:
        self.optimizer = types.SimpleNamespace(iterations=Iterations(iterations))

    def step(self) -> None:
        self.optimizer.iterations.value += 1


def test_the_keras_callback_reports_batches_epochs_and_the_end(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    callback = keras_callback(fake_keras(), reporter=reporter)
    assert issubclass(type(callback), FakeCallback)
    assert callback._supports_tf_logs is True
    model = FakeModel()
    callback.set_params({"epochs": 2, "steps": 3, "verbose": 1})
    callback.set_model(model)
    callback.on_train_begin()
    for epoch in range(2):
        callback.on_epoch_begin(epoch)
        for batch in range(3):
            if epoch == 1 and batch == 1:
                clock.advance(reporter.interval)
            model.step()
            callback.on_train_batch_end(batch, {"loss": 1.0 / model.optimizer.iterations.value})
            assert reporter.flush(WAIT)
        clock.advance(1.0)
        callback.on_epoch_end(epoch, {"loss": 0.5, "val_loss": 0.75, "note": "text"})
        assert reporter.flush(WAIT)
    clock.advance(1.0)
    callback.on_train_end({"loss": 0.5, "val_loss": 0.75})
    bodies = [s.body for s in server.recorder.seen]
    totals = {"totalSteps": 6, "totalEpochs": 2}
    assert bodies == [
        # epochs completed: 0 during the first, 1 after it
        {"step": 1, "epoch": 0, **totals, "metrics": {"loss": 1.0}},
        {"step": 3, "epoch": 1, **totals, "metrics": {"loss": 0.5, "val_loss": 0.75}},
        {"step": 5, "epoch": 1, **totals, "metrics": {"loss": 0.2}},
        {"step": 6, "epoch": 2, **totals, "metrics": {"loss": 0.5, "val_loss": 0.75}},
        {
            "step": 6,
            "epoch": 2,
            **totals,
            "metrics": {"loss": 0.5, "val_loss": 0.75},
            "final": True,
        },
    ]


def test_the_keras_callback_counts_batches_without_an_optimizer_and_hands_over_held_ones(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    callback = keras_callback(fake_keras(), reporter=reporter, total_steps=50, every_n_batches=2)
    callback.set_params({"epochs": 1, "steps": None})
    callback.set_model(types.SimpleNamespace())  # no optimizer: the batches are counted
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    for batch in range(6):
        callback.on_train_batch_end(batch, {"loss": float(batch)})
        assert reporter.flush(WAIT)
    callback.on_test_begin()  # validation: the held batch goes out when the interval allows
    clock.advance(reporter.interval)
    assert reporter.flush(WAIT)
    assert [s.body for s in server.recorder.seen] == [
        {"step": 2, "epoch": 0, "totalSteps": 50, "totalEpochs": 1, "metrics": {"loss": 1.0}},
        {"step": 6, "epoch": 0, "totalSteps": 50, "totalEpochs": 1, "metrics": {"loss": 5.0}},
    ]


def test_the_keras_callback_never_raises_into_fit(
    server: TLSServer,
    make_reporter: Callable[..., Reporter],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(Reporter):
        def due(self, *, force: bool = False) -> bool:
            raise RuntimeError("a bug in the reporter")

        def report(self, *args: Any, **kwargs: Any) -> bool:
            raise RuntimeError("a bug in the reporter")

    monkeypatch.setattr(progress, "_BUGS", set())
    callback = keras_callback(fake_keras(), reporter=Broken(server.url, None, None))
    callback.set_params({"epochs": 1, "steps": 2})
    callback.set_model(FakeModel())
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    callback.on_train_batch_end(0, {"loss": 1.0})
    callback.on_train_batch_end(1, {"loss": 1.0})
    callback.on_epoch_end(0, {})
    callback.on_train_end({})
    bugs = [r for r in records(caplog) if "a bug" in r.getMessage()]
    assert len(bugs) == 3  # one per hook that failed, not one per call
    assert all(r.exc_info for r in bugs)


def test_the_keras_callback_checks_its_arguments() -> None:
    with pytest.raises(ValueError):
        keras_callback(fake_keras(), every_n_batches=-1)
    # 0: no batch hooks at all (ParameterServerStrategy refuses callbacks that have them)
    epochs_only = keras_callback(fake_keras(), every_n_batches=0)
    assert epochs_only._implements_train_batch_hooks() is False
    assert keras_callback(fake_keras())._implements_train_batch_hooks() is True
    with pytest.raises(TypeError):
        keras_callback(fake_keras(), every_n_batches=1.5)  # type: ignore[arg-type]


def test_under_several_replicas_batches_report_their_step_and_epochs_the_metrics(
    server: TLSServer, reporter: Reporter, clock: Clock
) -> None:
    # tf_keras's batch logs under MultiWorkerMirroredStrategy are not the mean loss
    callback = keras_callback(fake_keras(), reporter=reporter)
    model = FakeModel()
    model.distribute_strategy = types.SimpleNamespace(num_replicas_in_sync=2)  # type: ignore[attr-defined]
    callback.set_params({"epochs": 1, "steps": 2})
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    model.step()
    callback.on_train_batch_end(0, {"loss": 2.0})
    assert reporter.flush(WAIT)
    clock.advance(1.0)
    callback.on_epoch_end(0, {"loss": 1.0})
    assert reporter.flush(WAIT)
    assert [s.body for s in server.recorder.seen] == [
        {"step": 1, "epoch": 0, "totalSteps": 2, "totalEpochs": 1},
        {"step": 1, "epoch": 1, "totalSteps": 2, "totalEpochs": 1, "metrics": {"loss": 1.0}},
    ]


def test_the_helper_and_the_server_share_their_limits() -> None:
    """What the helper promises to send is what the server takes: the same limits, and
    its extreme documents parse."""
    from reconcile.progress import wire

    assert progress.MAX_COUNT == wire.MAX_INT
    assert progress.MAX_METRICS == wire.MAX_METRICS
    assert progress.MAX_SECTIONS == wire.MAX_SECTIONS
    assert progress.MAX_BODY == wire.MAX_BODY_BYTES
    top = progress.MAX_COUNT
    head = progress._head(top, top, top, top, True)
    assert head == {"step": top, "totalSteps": top, "epoch": top, "totalEpochs": top, "final": True}
    many = {f"m{i}": 1.5e308 for i in range(40)}
    job = progress._Job(1, head, many, {f"s{i}": 1e308 for i in range(40)}, False)
    parsed = wire.parse_report(job.body())
    assert parsed.step == top and len(parsed.metrics) == wire.MAX_METRICS
    # one past the limit: dropped by the helper (the step) or left out (the rest)
    assert progress._head(top + 1, None, None, None, False) is None
    assert progress._head(1, top + 1, None, None, False) == {"step": 1}
