"""Differential fuzzing of controller.client.http's answer reading, with h11 as the oracle.

Hypothesis writes answers, well-formed and malformed (status lines, fields, lengths,
chunk framing, trailers, obsolete folding, line ends, stray bytes, truncation, single
bytes changed). A scripted server sends each, in a few writes, to a real ``Pool``
request over a socket, then closes; h11, as a client that sent the same GET, reads the
same bytes followed by the close. Both must accept (with the same status and the same
body bytes) or both refuse.

Where RFC 9112 lets a recipient choose and we choose to refuse what h11 takes, the
example is counted as excluded, not as agreement. Each exclusion names the reason we
refuse and is recognised by our own error message (or the generator's tag for the
lone LF, which can surface as several messages):

- ``obs-fold``: h11 unfolds obsolete line folding (RFC 9112 5.2 lets it); we refuse it.
- ``bare LF``: h11 takes a lone LF as a line end (RFC 9112 2.2: MAY); we want CRLF.
- ``control character``: h11's field value, reason and chunk extension patterns take
  control characters (and CR in an extension); RFC 9110 5.5 lets a recipient keep them,
  Go's reader refuses them, and so do we.
- ``CL with TE``: h11 lets chunked win over Content-Length (RFC 9112 6.3 allows it); we
  refuse the pair, the sign of a smuggling attempt.
- ``HTTP major version``: h11 reads any ``HTTP/d.d`` status line; we read HTTP/1.x only.
- ``long Content-Length``: h11 reads up to 20 digits (and ignores them on a 204 or 304);
  we refuse more than 18, a length past 63 bits, as Go does.

The normal run is seeded (derandomize) and short; TFJOB_HTTP_FUZZ_EXAMPLES sets how many
(``make fuzz`` runs 20,000). With ``-s`` it prints its figures.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.client import http

EXAMPLES = int(os.environ.get("TFJOB_HTTP_FUZZ_EXAMPLES", "500"))

CTL_BYTES = b"\x00\x01\x08\x0b\x0c\x1b\x7f"


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    status: int = 0
    body: bytes = b""
    why: str = ""


@dataclass(frozen=True)
class Example:
    pieces: tuple[bytes, ...]
    tags: frozenset[str]

    @property
    def raw(self) -> bytes:
        return b"".join(self.pieces)


# -- the oracle ----------------------------------------------------------------------


def h11_reads(raw: bytes) -> Verdict:
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=http.MAX_HEAD)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(raw)
    conn.receive_data(b"")  # the server closes after its answer
    status = 0
    body = bytearray()
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return Verdict(True, status, bytes(body))
            elif isinstance(event, h11.InformationalResponse):
                continue
            else:  # NEED_DATA after the close, ConnectionClosed: the answer ended early
                return Verdict(False, why=f"h11: {event!r}")
    except h11.ProtocolError as exc:
        return Verdict(False, why=f"h11: {exc}")


# -- ours, through a socket ----------------------------------------------------------


class Server:
    """A loop in a thread serving one scripted answer per connection."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pieces: tuple[bytes, ...] = ()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.url = self.run(self._start())

    def run(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    async def _start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pieces = self.pieces
        try:
            await reader.readuntil(b"\r\n\r\n")
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)  # a chance for the client to read a piece alone
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def ask(self) -> Verdict:
        pool = http.Pool(http.Endpoint.parse(self.url), ssl_context=None)
        try:
            deadline = asyncio.get_running_loop().time() + 10
            status, body = await pool.request("GET", "/", headers={}, deadline=deadline)
            return Verdict(True, status, body)
        except TimeoutError as exc:
            raise AssertionError("the client hung on an answer the server had closed") from exc
        except OSError as exc:  # anything else escaping is a failure of the test
            return Verdict(False, why=f"{type(exc).__name__}: {exc}")
        finally:
            await pool.close()

    def close(self) -> None:
        self._server.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


# -- the generator -------------------------------------------------------------------

CRLF = b"\r\n"

#: what an example may get wrong: a third get none, a third one, a third two
FAULTS = (
    "version",
    "status",
    "reason",
    "length",
    "coding",
    "chunk line",
    "chunk end",
    "trailers",
    "last chunk end",
    "field",
    "line end",
    "blank line",
    "byte",
    "cut",
)


def pick(draw: st.DrawFn, fault: bool, good: list[bytes], bad: list[bytes]) -> bytes:
    return draw(st.sampled_from(bad if fault else good))


@st.composite
def status_line(draw: st.DrawFn, faults: frozenset[str], tags: set[str]) -> bytes:
    version = pick(
        draw,
        "version" in faults,
        [b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.2"],
        [b"HTTP/2.0", b"http/1.1", b"HTTP/1.10", b"HTTP/1", b"HTTP/1.1 "],
    )
    if version == b"HTTP/2.0":
        tags.add("version")
    status = pick(
        draw,
        "status" in faults,
        [b"200", b"200", b"201", b"204", b"304", b"404", b"500", b"999"],
        [b"101", b"099", b"2_00", b"20", b"2000", b"+20", b" 200", b"2 00", b"199"],
    )
    reason = pick(
        draw,
        "reason" in faults,
        [b" OK", b" OK", b"", b" ", b" Not  Found", b" caf\xe9", b" a\tb"],
        [b" a\x01b", b" \x7f", b" a\rb", b"\tOK", b" a\x00"],
    )
    if any(c in CTL_BYTES for c in reason):
        tags.add("ctl")
    return version + b" " + status + reason


def length_fields(draw: st.DrawFn, fault: bool, n: int) -> list[bytes]:
    right = str(n).encode()
    good = [[right], [right], [right, right], [b"0" + right], [b" %s\t" % right]]
    good.append([b"%s, %s" % (right, right)])
    bad = [
        [b"%s,%d" % (right, n + 1)],
        [right, str(n + 1).encode()],
        [right, b"0" + right],
        [b"+" + right],
        [b"-1"],
        [b"0x%x" % n],
        [b""],
        [b"1_0"],
        [str(n + 3).encode()],
        [str(max(n - 1, 0)).encode()],
        [b"%s, " % right],
        [b"9" * 19],
    ]
    values = draw(st.sampled_from(bad if fault else good))
    return [b"Content-Length: " + v for v in values]


def coding_fields(draw: st.DrawFn, fault: bool) -> list[bytes]:
    good = [[b"chunked"], [b"chunked"], [b"Chunked"], [b" chunked\t"]]
    bad = [
        [b"chunked, identity"],
        [b"identity, chunked"],
        [b"xchunkedx"],
        [b"gzip"],
        [b"chunked", b"chunked"],
        [b""],
    ]
    values = draw(st.sampled_from(bad if fault else good))
    return [b"Transfer-Encoding: " + v for v in values]


@st.composite
def chunked_body(draw: st.DrawFn, body: bytes, faults: frozenset[str], tags: set[str]) -> bytes:
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
    parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    parts = [p for p in parts if p]  # an empty chunk would end the body
    bad_line = draw(st.integers(0, max(len(parts) - 1, 0))) if "chunk line" in faults else -1
    bad_end = draw(st.integers(0, max(len(parts) - 1, 0))) if "chunk end" in faults else -1
    out = []
    for i, part in enumerate(parts):
        size = draw(st.sampled_from([b"%x", b"%X", b"0%x"])) % len(part)
        ext = draw(st.sampled_from([b"", b"", b"", b";a=b", b"; x", b";", b';q="1"', b" ", b"\t"]))
        line = size + ext
        if i == bad_line:
            mangle = draw(
                st.sampled_from(
                    [b"0x", b"-", b"+", b" ", b"empty", b"big", b"small", b";\x01", b";\r", b"g"]
                )
            )
            if mangle == b"empty":
                line = ext
            elif mangle == b"big":
                line = b"%x" % (len(part) + 1) + ext
            elif mangle == b"small":
                line = b"%x" % (len(part) - 1) + ext
            elif mangle.startswith(b";"):
                line = size + mangle
                tags.add("ctl")
            else:
                line = mangle + line
        end = draw(st.sampled_from([b"XY", b"", b"\n", b"\r", b"\r\r\n"])) if i == bad_end else CRLF
        if end == b"\n":
            tags.add("bare-lf")
        out.append(line + CRLF + part + end)
    last = draw(st.sampled_from([b"0", b"0", b"000", b"0;x=y"])) + CRLF
    trailers = draw(
        st.sampled_from(
            [[b"Transfer-Encoding: gzip"], [b"no colon"], [b"X-T: 1", b" fold"], [b"X: \x01"]]
            if "trailers" in faults
            else [[], [], [], [b"X-T: 1"], [b"Content-Length: 5"], [b"Expires: 0", b"X: y"]]
        )
    )
    if b"X: \x01" in trailers:
        tags.add("ctl")
    end = pick(draw, "last chunk end" in faults, [CRLF], [b"", b"\n", b"\r", b"X\r\n"])
    if end == b"\n":
        tags.add("bare-lf")
    return b"".join(out) + last + b"".join(t + CRLF for t in trailers) + end


GOOD_FIELDS = [
    b"Content-Type: application/json",
    b"X-A:",
    b"X-B: a  b",
    b"X-C: \xff\xfe",
    b"Connection: close",
    b"Connection: keep-alive",
    b"Connection: Close, x-foo",
    b"Audit-Id: 0b1c2d3e",
    b"X-D:\tv\t",
]
BAD_FIELDS = [
    b"X-E : v",
    b"no colon here",
    b": empty name",
    b"X(F): v",
    b" folded",
    b"\tfolded",
    b"X-G: a\x01b",
    b"X-H: a\x7f",
    b"X-I: a\x00b",
    b"X-J: a\rb",
]


@st.composite
def examples(draw: st.DrawFn) -> Example:
    faults: frozenset[str] = draw(
        st.one_of(
            st.just(frozenset()),
            st.sampled_from(FAULTS).map(lambda f: frozenset({f})),
            st.frozensets(st.sampled_from(FAULTS), min_size=2, max_size=2),
        )
    )
    tags: set[str] = set()
    head = [draw(status_line(faults, tags))]
    body = draw(
        st.binary(min_size=1, max_size=48)
        | st.sampled_from([b"", b'{"a":1}\n{"b":2}\n', b"0\r\n\r\n"])
    )
    framing = draw(st.sampled_from(["length"] * 4 + ["chunked"] * 4 + ["close", "both"]))
    # a fault of one framing gets that framing, so that it is seen at all
    if faults & {"coding", "chunk line", "chunk end", "trailers", "last chunk end"}:
        framing = "chunked"
    elif "length" in faults:
        framing = "length"
    fields: list[bytes] = []
    if framing in ("length", "both"):
        fields += length_fields(draw, "length" in faults, len(body))
    if framing in ("chunked", "both"):
        fields += coding_fields(draw, "coding" in faults)
        encoded = draw(chunked_body(body, faults, tags))
    else:
        encoded = body
    extra = draw(st.lists(st.sampled_from(GOOD_FIELDS), max_size=3))
    if "field" in faults:
        bad = draw(st.sampled_from(BAD_FIELDS))
        extra.insert(draw(st.integers(0, len(extra))), bad)
        if any(c in CTL_BYTES for c in bad):
            tags.add("ctl")
    at = draw(st.integers(0, len(fields)))
    head += fields[:at] + extra + fields[at:]
    ends = [CRLF] * len(head)
    if "line end" in faults:  # one line end of the head a lone LF or CR
        i = draw(st.integers(0, len(ends) - 1))
        ends[i] = draw(st.sampled_from([b"\n", b"\r"]))
        if ends[i] == b"\n":
            tags.add("bare-lf")
    blank = pick(draw, "blank line" in faults, [CRLF], [b"\n", b"\r", b" \r\n"])
    if blank == b"\n":
        tags.add("bare-lf")
    raw = b"".join(line + end for line, end in zip(head, ends, strict=True)) + blank + encoded
    if draw(st.integers(0, 9)) == 0:
        raw = b"HTTP/1.1 100 Continue\r\n\r\n" + raw
    if draw(st.integers(0, 5)) == 0:  # bytes after the answer
        raw += draw(st.sampled_from([b"x", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"]))
    if "byte" in faults:  # one byte changed
        i = draw(st.integers(0, max(len(raw) - 1, 0)))
        byte = draw(st.sampled_from([b"\x00", b"\x01", b"\x7f", b"\t", b" ", b"\r", b"\n", b"0"]))
        if raw[i : i + 1] in (b"\r", b"\n"):
            tags.add("bare-lf")  # the other half of a CRLF is left alone
        raw = raw[:i] + byte + raw[i + 1 :]
        tags.add({b"\n": "bare-lf", b"\t": "ws", b" ": "ws", b"0": "digit"}.get(byte, "ctl"))
    if "cut" in faults:
        raw = raw[: draw(st.integers(0, len(raw)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=3)))
    pieces = tuple(raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True))
    return Example(pieces, frozenset(tags))


# -- the comparison ------------------------------------------------------------------


def exclusion(ex: Example, ours: Verdict) -> str | None:
    """Why h11 may accept what we refuse here (see the module doc), or None."""
    why = ours.why
    if "obs-fold" in why:
        return "obs-fold"
    if "both Content-Length and Transfer-Encoding" in why:
        return "CL with TE"
    if "not an HTTP/1.x answer" in why and re.match(
        rb"(HTTP/1\.1 100 Continue\r\n\r\n)?HTTP/[02-9]\.[0-9] ", ex.raw
    ):
        return "HTTP major version"
    if re.search(r"bad Content-Length: b'[0-9]{19,20}'", why):
        return "long Content-Length"
    if "control character" in why or ("bare CR in the chunk line" in why and "ctl" in ex.tags):
        return "control character"
    # a lone LF where a line should end: seen in the head, or a CRLF never found
    ended = ("closed before an answer", "closed mid-body")
    if "bare LF" in why or ("bare-lf" in ex.tags and any(e in why for e in ended)):
        return "bare LF"
    return None


def test_answers_are_read_as_h11_reads_them(server: Server) -> None:
    tally: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(examples())
    def check(ex: Example) -> None:
        oracle = h11_reads(ex.raw)
        server.pieces = ex.pieces
        ours = server.run(server.ask())
        tally["examples"] += 1
        if oracle.accepted and ours.accepted:
            assert (ours.status, ours.body) == (oracle.status, oracle.body), ex
            tally["agreements"] += 1
            tally["accepted by both"] += 1
        elif not oracle.accepted and not ours.accepted:
            tally["agreements"] += 1
            tally["refused by both"] += 1
        elif oracle.accepted:
            reason = exclusion(ex, ours)
            assert reason is not None, f"h11 accepts, we refuse ({ours.why}): {ex.raw!r}"
            tally[f"excluded: {reason}"] += 1
        else:
            raise AssertionError(f"we accept, h11 refuses ({oracle.why}): {ex.raw!r}")

    check()
    figures = ", ".join(f"{k} {v}" for k, v in sorted(tally.items(), key=lambda kv: -kv[1]))
    print(f"\nhttp fuzz against h11: {figures}")
    assert tally["examples"] == EXAMPLES
    assert tally["accepted by both"] > EXAMPLES // 5 and tally["refused by both"] > EXAMPLES // 5
