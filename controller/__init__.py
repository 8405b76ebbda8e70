"""controller: the generic machinery of a Kubernetes controller, knowing nothing of TFJob.

The parts, lowest first (each may import the ones before it, never after;
hack/check_layers.py enforces it):

- the seam, at the top level: ``types`` (the protocols and value types the TFJob logic
  sees: JSON, Result, Reconciler, the cache and writer protocols, the index names),
  ``errors`` (API errors classified once), ``clock`` (the real clock and a driven one).
- ``observability/``: metric families and the Prometheus text format, the /metrics,
  /debug/queue and probe server, structlog set-up, event-loop lag, GC pauses.
- ``client/``: the API client: HTTP/1.1 connection pools, requests and watches, typed
  resources, flow control (token buckets); ``client/auth/``: kubeconfig, exec plugins
  and OIDC tokens.
- ``cache/``: informers (list, watch, relist) into indexed stores, with transforms that
  slim each object as it arrives.
- ``queue/``: the rate-limited work queue with client-go's contract.
- ``runtime/``: the controller (workers, the result contract), the manager (process
  lifecycle), leader election, expectations, background writes, events, pacing.

One watch event, followed: the informer (cache/) reads a MODIFIED pod off the watch
stream the client (client/) keeps open, stores it, and calls the handlers the
composition root registered; a handler maps the pod to its TFJob's key and adds it to
the queue (queue/). A worker (runtime/controller.py) takes the key, once however many
events arrived, and calls the reconciler with it; the reconciler reads the caches,
plans, and writes through the client, handing slow creates to the background
(runtime/background.py) and raising expectations (runtime/expectations.py) so that no
pass acts before the cache shows its writes. The result (done, requeue after, error)
goes back to the queue: errors are retried with per-key backoff.
"""
