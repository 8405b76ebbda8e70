"""Serving what clients push to the controller: reports over HTTPS (``reports``), their
bearer tokens reviewed by the apiserver and cached (``tokenreview``), per-caller rate
limits (``limits``), and the TLS certificate the endpoint serves (``tls``). Knows
nothing of what a report means: a ReportSink (controller.types) decides. Imports
observability/ and the seam; the composition root gives it the client's POST.
"""
