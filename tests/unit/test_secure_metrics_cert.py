"""The self-signed /metrics certificate is made at the first handshake, once, for the
Service's names (tfjob_controller.secure_metrics)."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from cryptography import x509

from controller.clock import FakeClock
from tfjob_controller import secure_metrics


def test_the_certificate_waits_for_the_first_handshake_and_is_made_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Any] = []
    real = secure_metrics.self_signed

    def counting(*a: Any, **kw: Any) -> Any:
        made.append(pair := real(*a, **kw))
        return pair

    monkeypatch.setattr(secure_metrics, "self_signed", counting)
    provider = secure_metrics.metrics_tls("", FakeClock(), "ops")
    assert made == []  # nothing signed at start-up
    first = provider()
    assert isinstance(first, ssl.SSLContext)
    assert provider() is first
    assert len(made) == 1
    cert = x509.load_pem_x509_certificate(made[0].tls_crt)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "tfjob-controller-metrics.ops.svc" in names.get_values_for_type(x509.DNSName)
