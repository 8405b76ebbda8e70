"""HTTP/1.1 on the wire: what we send and what we accept.

Strictness (RFC 9112; what Go's net/http refuses we refuse, and a little more):
- a head is CRLF-terminated lines of at most ``MAX_HEAD`` bytes in all, holding no
  control character but HTAB, no bare CR or LF (a lone LF is not read as a line end),
  and no obsolete line folding; the status line is ``HTTP/1.<digit> <3 digits>[ reason]``
  with a status from 100 (a 101 is refused: we never ask to switch protocols);
- each field line is ``token ":" value``, no space before the colon;
- ``Content-Length`` is 1 to 18 digits; several fields or a list are accepted only when
  every value is the same; ``Transfer-Encoding`` must be exactly ``chunked`` and given
  once; both in one answer is refused (RFC 9112 6.3: a smuggling sign);
- a chunk line is 1 to 16 hex digits, optionally ``;`` and an extension, optional
  trailing whitespace, CRLF; chunk data must be followed by CRLF; trailer fields follow
  the field rules and ``MAX_HEAD``;
- ``Connection`` is a comma-separated, case-insensitive token list;
- bodies are read in pieces of at most ``READ_LIMIT`` bytes, whatever a chunk's size,
  and ``Stream.lines`` refuses a line over its bound as soon as that many bytes are held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The stream buffer: a read returns up to this much at once, and a chunk of the body is
#: handed on in pieces no larger. A head searched for its end stops here at the latest.
READ_LIMIT = 2**21

#: The largest response head (status line and fields) or trailer section we read. Go's
#: client allows 1 MiB; the apiserver's heads are under 1 KiB.
MAX_HEAD = 256 * 1024

#: Methods sent again on a fresh connection when a reused one was found closed: the ones
#: Go's transport replays (idempotent by definition and carrying no body). A PUT or
#: DELETE is idempotent too, but the first copy may have been acted on, and a resent
#: write races with whoever wrote after it.
REPEATABLE = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class ProtocolError(OSError):
    """The server's answer is not HTTP/1.x as we read it, or the connection ended early."""


class InvalidRequest(ProtocolError, ValueError):
    """A request we refuse to send: it would not be the request the caller meant."""


class _Stale(OSError):
    """A reused connection failed before any byte of the answer: the server had closed
    it while idle, so the request may be sent again on a fresh one."""


@dataclass(slots=True)
class _Head:
    status: int
    length: int | None
    chunked: bool
    keep_alive: bool


# -- what we send --------------------------------------------------------------------

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_METHOD = re.compile(_TOKEN)
_FIELD_NAME = re.compile(_TOKEN)
#: a value as latin-1 can carry it, with no control character but HTAB
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


#: the names sent on every request, known to be tokens
_COMMON_NAMES = frozenset({"Accept", "Authorization", "Content-Type", "Host", "User-Agent"})
_COMMON_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _check_header(name: str, value: str) -> None:
    # the usual case in C-level string tests; the exact rule (HTAB, obs-text) after it
    if value.isascii() and value.isprintable() and name in _COMMON_NAMES:
        return
    if _FIELD_NAME.fullmatch(name) and _FIELD_VALUE.fullmatch(value):
        return
    # never the value in the message: it may be a credential
    if any(c in "\r\n" for c in name + value):
        why = "a line break (it would write fields of its own)"
    elif any(ord(c) > 0xFF for c in name + value):
        why = "a character outside latin-1"
    else:
        why = "a control character or, in the name, a separator"
    raise InvalidRequest(f"header {name[:40]!r}: {why}")


def _check_request_line(method: str, target: str) -> None:
    if method not in _COMMON_METHODS and _METHOD.fullmatch(method) is None:
        raise InvalidRequest(f"method {method[:20]!r}: not a token")
    # origin- or absolute-form: visible ASCII only (anything else is percent-encoded)
    if not (target.isascii() and target.isprintable() and target and " " not in target):
        raise InvalidRequest(
            f"target {target[:80]!r}: empty, or a space, control or non-ASCII character"
        )


# -- what we read --------------------------------------------------------------------

_BTOKEN = _TOKEN.encode()
#: any byte a head or trailer section may not hold: control characters but HTAB, and
#: CR or LF other than as a CRLF pair
_FORBIDDEN = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|(?<!\r)\n")
#: a whole head: the status line, then field lines, with no control character but HTAB
#: and no CR or LF but as line ends (one pass; _forbidden says what failed, if it does)
_HEAD = re.compile(
    rb"HTTP/1\.([0-9]) ([0-9]{3})(?: [\t\x20-\x7e\x80-\xff]*)?\r\n"
    rb"((?:" + _BTOKEN + rb":[\t\x20-\x7e\x80-\xff]*\r\n)*)\r\n"
)
_FIELDS = re.compile(rb"(?:" + _BTOKEN + rb":[\t\x20-\x7e\x80-\xff]*\r\n)*")
#: the fields that frame a message, each from its line's start (the CRLF before it)
_FRAMING = re.compile(
    rb"\r\n(content-length|transfer-encoding|connection):[ \t]*([^\r\n]*?)[ \t]*(?=\r\n)",
    re.IGNORECASE,
)
_LENGTH = re.compile(rb"[0-9]{1,18}")
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[\t\x20-\x7e\x80-\xff]*)?[ \t]*\r\n")


def _forbidden(raw: bytes, where: str) -> None:
    bad = _FORBIDDEN.search(raw)
    if bad is None:
        return
    byte = bad.group()[:1]
    if byte in (b"\r", b"\n"):
        name = "CR" if byte == b"\r" else "LF"
        raise ProtocolError(f"a bare {name} in the {where}")
    raise ProtocolError(f"a control character {byte!r} in the {where}")


def _bad_field_line(block: bytes, where: str) -> ProtocolError:
    """Why a field section that passed _forbidden does not parse (the slow path)."""
    for line in block.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            return ProtocolError(f"obsolete line folding (obs-fold) in the {where}")
        if line and re.fullmatch(_BTOKEN + rb":.*", line, re.DOTALL) is None:
            return ProtocolError(f"bad field line in the {where}: {line[:80]!r}")
    return ProtocolError(f"bad {where}")


@dataclass(slots=True)
class _Framing:
    length: bytes | None = None
    chunked: bool = False
    #: the Connection tokens, lower-cased
    connection: frozenset[bytes] = frozenset()


def _content_length(value: bytes, seen: bytes | None) -> bytes:
    """The digits of a Content-Length field. RFC 9112 6.3: a list, or several fields,
    is one length only if every value is the same (the same text, as Go and h11 read it:
    "5" and "05" are two)."""
    if _LENGTH.fullmatch(value) is None:
        values = {v.strip(b" \t") for v in value.split(b",")}
        if len(values) != 1 or _LENGTH.fullmatch(value := values.pop()) is None:
            raise ProtocolError(f"bad Content-Length: {value[:40]!r}")
    if seen is not None and seen != value:
        raise ProtocolError(f"two different Content-Lengths: {seen!r} and {value!r}")
    return value


def _framing(raw: bytes, start: int, where: str) -> _Framing:
    """The framing fields of the field lines in ``raw`` after ``start`` (which is at the
    CRLF ending the line before them), with their values checked."""
    found = _Framing()
    for m in _FRAMING.finditer(raw, start):
        name, value = m[1].lower(), m[2]
        if name == b"content-length":
            found.length = _content_length(value, found.length)
        elif name == b"transfer-encoding":
            if found.chunked:
                raise ProtocolError(f"two Transfer-Encoding fields in the {where}")
            if value.lower() != b"chunked":
                raise ProtocolError(f"Transfer-Encoding {value[:40]!r}: only chunked is read")
            found.chunked = True
        else:
            tokens = {t.strip(b" \t") for t in value.lower().split(b",")}
            found.connection = found.connection | tokens
    return found


def _parse_head(raw: bytes, method: str) -> _Head:
    if len(raw) > MAX_HEAD:
        raise ProtocolError(f"an answer head over {MAX_HEAD} bytes")
    m = _HEAD.fullmatch(raw)
    if m is None:
        if not raw.startswith(b"HTTP/1."):
            raise ProtocolError(f"not an HTTP/1.x answer: {raw[:80]!r}")
        _forbidden(raw, "answer head")
        line, _, fields = raw.partition(b"\r\n")
        if re.fullmatch(rb"HTTP/1\.[0-9] [0-9]{3}(?: .*)?", line, re.DOTALL) is None:
            raise ProtocolError(f"bad status line: {line[:80]!r}")
        raise _bad_field_line(fields, "answer head")
    status = int(m[2])
    if status < 100 or status == 101:
        raise ProtocolError(f"status {status}: not one we can take")
    framing = _framing(raw, m.start(3) - 2, "answer head")
    length = None if framing.length is None else int(framing.length)
    chunked = framing.chunked
    if length is not None and chunked:
        # RFC 9112 6.3: it "ought to be handled as an error"; a sign of smuggling
        raise ProtocolError("both Content-Length and Transfer-Encoding")
    if m[1] == b"0":
        keep_alive = b"keep-alive" in framing.connection
    else:
        keep_alive = b"close" not in framing.connection
    if method == "HEAD" or status in (204, 304) or status < 200:
        length, chunked = 0, False
    if length is None and not chunked:
        keep_alive = False  # the body ends when the server closes
    return _Head(status, length, chunked, keep_alive)


def _check_trailers(raw: bytes) -> None:
    """The trailer section (each line with its CRLF, the blank line not included):
    nothing of it is used, but it is read by the field rules."""
    if _FIELDS.fullmatch(raw) is None:
        _forbidden(raw, "trailer section")
        raise _bad_field_line(raw, "trailer section")
    _framing(b"\r\n" + raw, 0, "trailer section")
