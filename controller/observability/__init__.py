"""What the process tells its operators: metric families with the ecosystem's names,
the Prometheus text format, the HTTP server of /metrics, /debug/queue and the probes,
structlog's set-up, event-loop lag and garbage-collection pauses. Imports only the
seam, so every other part may report through it.
"""
