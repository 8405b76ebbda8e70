"""``tfjob-controller explain -f job.yaml`` (also ``tfjob-explain``): what the controller
would create for a TFJob, with no cluster.

The planning is reconcile.explain's, which runs the controller's own planner; this module
only reads the YAML, parses the flags and prints. It imports no Kubernetes client and
starts nothing.

Exit codes: 0 when every TFJob is valid, 1 when one is invalid (its field errors and the
Failed condition's message are printed) or would fail at once by a policy of its own
(a negative backoffLimit), 2 on a usage error or an unreadable input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import yaml

from reconcile.explain import Explanation, Row, explain
from reconcile.objects.reporting import DEFAULT_TOKEN_SECONDS, Reporting
from reconcile.plan import PlanConfig
from reconcile.policy.gang import gang_from_flag

PROG = "tfjob-explain"


def parse_args(argv: Sequence[str] | None = None, prog: str = PROG) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Print what tfjob-controller would create for a TFJob (pods, services,"
        " PodGroup), using the controller's own planner. No cluster is needed.",
    )
    p.add_argument(
        "-f",
        "--filename",
        required=True,
        help="YAML file with one or more TFJobs ('-' reads stdin); other kinds are skipped",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("yaml", "table"),
        default="yaml",
        help="yaml (default): the objects as the controller would POST them, as YAML"
        " documents, with what was assumed as comments; table: one line an object",
    )
    p.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="explain in this namespace (default: the job's, else 'default')",
    )
    p.add_argument(
        "--cluster-domain",
        default=os.environ.get("CUSTOM_CLUSTER_DOMAIN") or None,
        help="suffix for TF_CONFIG addresses, as the controller's flag"
        " (default: $CUSTOM_CLUSTER_DOMAIN)",
    )
    p.add_argument(
        "--gang-scheduler-name",
        default="",
        help="as the controller's flag: empty (default) is no gang scheduling; 'volcano'"
        " makes a Volcano PodGroup; any other value a scheduler-plugins one, with that"
        " value as the pods' schedulerName",
    )
    p.add_argument(
        "--progress-url",
        default="",
        help="as the controller's flag: the training-progress endpoint pods are given"
        " (docs/progress.md); empty (default) is none",
    )
    p.add_argument(
        "--progress-token-seconds",
        type=int,
        default=DEFAULT_TOKEN_SECONDS,
        help="as the controller's flag (default %(default)s)",
    )
    p.add_argument(
        "--priority-class",
        action="append",
        type=_priority_class,
        default=[],
        metavar="NAME=VALUE",
        help="the value of a PriorityClass the templates name (repeatable): the PodGroup's"
        " minResources takes replica types by it, highest first (missing ones count as 0)",
    )
    return p.parse_args(argv)


def _priority_class(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    try:
        number = int(value)
    except ValueError:
        number = None
    if not sep or not name or number is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE, VALUE an integer")
    return name, number


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = parse_args(argv, prog)
    try:
        docs = _load(args.filename)
    except (OSError, yaml.YAMLError) as e:
        print(f"{prog}: cannot read {args.filename}: {e}", file=sys.stderr)
        return 2
    jobs = []
    for i, doc in enumerate(docs, start=1):
        if isinstance(doc, dict) and doc.get("kind") == "TFJob":
            jobs.append(doc)
        elif doc is not None:
            kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            print(f"{prog}: document {i} skipped: {kind} is not a TFJob", file=sys.stderr)
    if not jobs:
        print(f"{prog}: no TFJob in {args.filename}", file=sys.stderr)
        return 2
    reporting = None
    if args.progress_url:
        reporting = Reporting(args.progress_url, token_seconds=args.progress_token_seconds)
    config = PlanConfig(
        cluster_domain=args.cluster_domain,
        gang=gang_from_flag(args.gang_scheduler_name),
        reporting=reporting,
    )
    now = datetime.now(UTC)
    priorities = dict(args.priority_class)
    found = [explain(j, config, now, priorities=priorities, namespace=args.namespace) for j in jobs]
    write = _write_table if args.output == "table" else _write_yaml
    try:
        write(found, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (| head): no traceback, and no second error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    code = 0
    for what, names in (
        ("invalid TFJob", [e.name for e in found if not e.valid]),
        ("TFJob failed at once", [e.name for e in found if e.valid and e.failed_reason]),
    ):
        if names:
            print(f"{prog}: {what}: {', '.join(n or '(unnamed)' for n in names)}", file=sys.stderr)
            code = 1
    return code


class _Loader(yaml.SafeLoader):
    """YAML as kubectl reads it: an unquoted date stays the string it is written as
    (the API has no timestamp type), so every document is JSON."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _load(filename: str) -> list[Any]:
    if filename == "-":
        docs = list(yaml.load_all(sys.stdin, Loader=_Loader))
    else:
        with open(filename, encoding="utf-8") as f:
            docs = list(yaml.load_all(f, Loader=_Loader))
    for i, doc in enumerate(docs, start=1):
        try:
            json.dumps(doc, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise yaml.YAMLError(f"document {i} is not JSON: {e}") from e
    return docs


# --- output -------------------------------------------------------------------------------


def _summary(e: Explanation) -> str:
    head = f"TFJob {e.namespace}/{e.name}"
    if not e.valid:
        return f"{head}: invalid; the controller sets Failed, reason {e.failed_reason}"
    if e.failed_reason is not None:
        return f"{head}: fails at once; the controller sets Failed, reason {e.failed_reason}"
    if e.skip_reason:
        return f"{head}: the controller leaves it alone ({e.skip_reason})"
    made = f"{_count(len(e.services), 'service')}, {_count(len(e.pods), 'pod')}"
    if e.podgroup is not None:
        made = f"a PodGroup, {made}"
    return f"{head}: {made}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _details(e: Explanation) -> list[str]:
    """What the table and the YAML comments both say, one item a line."""
    lines = [f"note: {n}" for n in e.notes]
    if e.failed_reason is not None:
        lines.append(f"Failed condition message: {e.failed_message}")
    lines += [f"error: {err}" for err in e.errors]
    lines += [f"default: {d}" for d in e.defaults]
    # an invalid job's one event repeats the Failed condition's message
    lines += [f"event: {ev}" for ev in e.events if not ev.endswith(f": {e.failed_message}")]
    if e.podgroup is not None:
        spec = e.podgroup.get("spec") or {}
        resources = ", ".join(f"{k}={v}" for k, v in (spec.get("minResources") or {}).items())
        lines.append(
            f"PodGroup {e.podgroup['apiVersion']}: minMember {spec.get('minMember')},"
            f" minResources {resources or '(none)'}"
        )
    return lines


def _printable(text: str) -> str:
    """Control characters escaped: a YAML comment or a terminal line must not hold them."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _comment(lines: Iterable[str], prefix: str = "# ") -> str:
    return "".join(
        f"{prefix}{_printable(line)}".rstrip() + "\n" for text in lines for line in text.split("\n")
    )


def _write_yaml(found: Sequence[Explanation], out: TextIO) -> None:
    for e in found:
        out.write(_comment([_summary(e), *_details(e)]))
        if e.effective is not None:
            spec = yaml.safe_dump(e.effective["spec"], sort_keys=False).rstrip("\n")
            out.write(_comment(["effective spec, after defaulting:"]))
            out.write(_comment(spec.split("\n"), prefix="#   "))
        for obj in e.objects:
            out.write("---\n")
            out.write(yaml.safe_dump(obj, sort_keys=False))


COLUMNS = ("KIND", "NAME", "REPLICA-TYPE", "INDEX", "SCHEDULER", "TF_CONFIG-TASK")


def _cells(row: Row) -> tuple[str, ...]:
    cells = (row.kind, row.name, row.replica_type, row.index, row.scheduler_name, row.task)
    return tuple(_printable(c) or "-" for c in cells)


def _write_table(found: Sequence[Explanation], out: TextIO) -> None:
    for n, e in enumerate(found):
        if n:
            out.write("\n")
        out.write(_printable(_summary(e)) + "\n")
        out.write(_comment(_details(e), prefix="  "))
        rows = [COLUMNS, *(_cells(r) for r in e.rows())]
        if len(rows) == 1:
            continue
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
        for r in rows:
            out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
            out.write("\n")


if __name__ == "__main__":
    sys.exit(main())
