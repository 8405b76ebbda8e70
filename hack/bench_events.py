#!/usr/bin/env python3
"""Benchmark: the controller's CPU per Event written, one request each against twenty
pipelined on one connection (controller.runtime.events, ``batch_size``).

    .venv/bin/python -m hack.bench_events --kubeconfig PATH [--events 400] [--rounds 2]

Against a real apiserver (the local cluster's kubeconfig, say): each round writes
``--events`` new Events through an EventRecorder on a client without a rate limit,
once with ``batch_size=1`` (each create its own exchange, as before pipelining) and
once with 20, and reports process CPU and wall time per event. The Events go to the
``default`` namespace and are left for the apiserver's event TTL.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid

from controller.client.api import ClientSettings, KubeApi
from controller.client.kube import EVENTS, ResourceClient
from controller.runtime.events import EventRecorder

BATCHES = (1, 20)


async def one_round(api: KubeApi, events: int, batch: int) -> tuple[float, float, int]:
    """(CPU ms per event, wall ms per event, events written) for one recorder."""
    recorder = EventRecorder(ResourceClient(api, EVENTS), "bench-events", batch_size=batch)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "bench-events", "namespace": "default", "uid": str(uuid.uuid4())},
    }
    tag = uuid.uuid4().hex[:6]
    for i in range(events):
        recorder.event(job, "Normal", "SuccessfulCreatePod", f"Created pod: {tag}-{i}")
    cpu, wall = time.process_time(), time.monotonic()
    await recorder.flush()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    return 1e3 * cpu / events, 1e3 * wall / events, recorder.written


async def run(args: argparse.Namespace) -> None:
    api = await KubeApi.from_kubeconfig(args.kubeconfig, settings=ClientSettings(qps=0))
    async with api:
        await one_round(api, 20, 1)  # warm: connections, imports
        print("| batch | CPU per event (ms) | wall per event (ms) | written |")
        print("|---|---|---|---|")
        for r in range(args.rounds):
            for batch in BATCHES:
                print(f"[bench-events] round {r + 1}, batch {batch}", file=sys.stderr)
                cpu, wall, written = await one_round(api, args.events, batch)
                print(f"| {batch} | {cpu:.3f} | {wall:.2f} | {written}/{args.events} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--events", type=int, default=400)
    p.add_argument("--rounds", type=int, default=2)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
