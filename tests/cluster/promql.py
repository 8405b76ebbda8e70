"""The metric selectors a PromQL expression reads: each metric name with the label names
its matchers and its aggregations' ``by``/``without``/``on``/``ignoring`` clauses name.

Enough of PromQL for rules and dashboards written here, not a parser: strings and range
or subquery brackets are set aside first, then every identifier is a function (followed
by ``(``), a keyword or aggregation, a label list's member, or a metric name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FUNCTIONS_AND_KEYWORDS = {
    # aggregation operators and clause keywords
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "atan2",
}  # fmt: skip
LABEL_CLAUSES = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHER = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*\"")


@dataclass
class Selector:
    metric: str
    labels: set[str] = field(default_factory=set)


def selectors(expr: str) -> list[Selector]:
    out: list[Selector] = []
    text = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges and subqueries: [5m], [1h:1m]
    i = 0
    clause_labels: list[set[str]] = []
    while i < len(text):
        ch = text[i]
        if ch in "\"'`":
            m = _STRING.match(text, i)
            i = m.end() if m else i + 1
            continue
        if ch.isdigit() or (ch == "." and text[i + 1 : i + 2].isdigit()):
            # a number (5, 0.99, 1e3, 0x1f): its letters are not identifiers
            while i < len(text) and (text[i].isalnum() or text[i] in "._"):
                i += 1
            continue
        m = _IDENT.match(text, i)
        if m is None:
            i += 1
            continue
        word, i = m.group(), m.end()
        rest = text[i:].lstrip()
        if word in LABEL_CLAUSES:
            if rest.startswith("("):
                start = text.index("(", i)
                end = text.index(")", start)
                names = {n.strip() for n in text[start + 1 : end].split(",") if n.strip()}
                clause_labels.append(names)
                i = end + 1
            continue
        if word in FUNCTIONS_AND_KEYWORDS or rest.startswith("("):
            continue
        if word in ("inf", "nan", "Inf", "NaN"):
            continue
        sel = Selector(word)
        if rest.startswith("{"):
            start = text.index("{", i)
            end = _closing_brace(text, start)
            body = text[start + 1 : end]
            for mm in _MATCHER.finditer(body):
                sel.labels.add(mm.group(1))
            i = end + 1
        out.append(sel)
    # a clause's labels must be on the metrics it aggregates: every selector here
    for names in clause_labels:
        for sel in out:
            sel.labels |= names
    return out


def _closing_brace(text: str, start: int) -> int:
    i = start + 1
    while i < len(text):
        if text[i] in "\"'`":
            m = _STRING.match(text, i)
            i = m.end() if m else i + 1
            continue
        if text[i] == "}":
            return i
        i += 1
    raise ValueError(f"no closing brace in {text!r}")
