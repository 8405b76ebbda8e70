"""What every part of the benchmark shares: user agents, label keys, progress output,
QPS modes and percentiles."""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import hack.cluster as cluster_mod

REPO = cluster_mod.REPO


CONTROLLER_UA = "tfjob-controller"


FLOOR_UA = "tfjob-bench-floor"


HARNESS_UA = "tfjob-bench"


#: The upstream TFJob controller's requests (hack/upstream-operator, --compare upstream).
UPSTREAM_UA = "tfjob-upstream"


OPERATOR_SELECTOR = "training.kubeflow.org/operator-name=tfjob-controller"


JOB_NAME_LABEL = "training.kubeflow.org/job-name"


RTYPE_LABEL = "training.kubeflow.org/replica-type"


ROLE_LABEL = "training.kubeflow.org/job-role"


T_START = time.monotonic()


def say(msg: str) -> None:
    print(
        f"[bench {time.strftime('%H:%M:%S')} +{time.monotonic() - T_START:5.0f}s] {msg}", flush=True
    )


@dataclass(frozen=True)
class Mode:
    qps: float  # <= 0: unlimited
    burst: int

    @property
    def label(self) -> str:
        return "unlimited" if self.qps <= 0 else f"{self.qps:g}/{self.burst}"

    @property
    def slug(self) -> str:
        return "unlimited" if self.qps <= 0 else f"qps{self.qps:g}"


def parse_modes(text: str) -> list[Mode]:
    modes = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        if part in ("unlimited", "0", "-1", "none"):
            modes.append(Mode(-1.0, 1))
            continue
        qps_s, _, burst_s = part.partition("/")
        qps = float(qps_s)
        burst = int(burst_s) if burst_s else max(int(qps * 1.5), 1)
        modes.append(Mode(qps, burst) if qps > 0 else Mode(-1.0, 1))
    if not modes:
        raise argparse.ArgumentTypeError("no QPS mode given")
    return modes


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]
