"""Where the TFJob logic meets the machinery: the reconciler, the one write layer,
the event handlers, expectation keys, pacing, job metrics and the slim cache
transforms. The only part of reconcile/ that uses the machinery's protocols
(controller.types) to read caches and write.
"""
