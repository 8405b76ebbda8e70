"""Where the TFJob logic meets the machinery: the reconciler (tfjob) and what it
remembers of a job between passes (memory), the write layer (writes, child_writes,
claims, status_writes), the event handlers, expectation keys, pacing, job metrics and
the slim cache transforms. The only part of reconcile/ that calls the machinery,
through the protocols of controller.types (ports: the caches and writers it is given).
"""
