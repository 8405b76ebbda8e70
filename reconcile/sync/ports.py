"""What the reconciler is given by the composition root: the caches it reads (by the
machinery's CacheReader protocol) and the writers it writes through (ObjectWriter).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.types import CacheReader, ObjectWriter


@dataclass
class Writers:
    jobs: ObjectWriter
    pods: ObjectWriter
    services: ObjectWriter
    #: gang scheduling only (PlanConfig.gang)
    podgroups: ObjectWriter | None = None
    #: the tracking finalizer's removals (pod patches, reconcile.policy.tracking); None:
    #: through ``pods``
    releases: ObjectWriter | None = None


@dataclass
class Caches:
    jobs: CacheReader
    pods: CacheReader
    services: CacheReader
    #: gang scheduling only: PodGroups by (namespace, name), PriorityClasses by name
    podgroups: CacheReader | None = None
    priorityclasses: CacheReader | None = None
    #: training progress only: the cluster's nodes (slim), where a straggler may go
    nodes: CacheReader | None = None
