"""The API client: everything between a request and the apiserver.

``http`` (HTTP/1.1 over pools of keep-alive connections, strict parsing, proxies, TLS),
``api`` (KubeApi: requests, JSON decoding, watches, retries, budgets of its own),
``kube`` (typed access to one resource: get, list in pages, watch, create, patch,
delete), ``flowcontrol`` (the token buckets and a write's point of no return) and
``auth/`` (credentials). Imports the seam and observability only.
"""
