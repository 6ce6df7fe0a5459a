"""HTTPS to a pinned address: the certificate is still checked against the URL's host name."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from controlplane.alerts.transports import TransportError, WebhookTransport
from tests.support.receivers import Receiver, handler_for

CONFIG = {"secret": "whsec-6c1f0d8a4b2e9f73"}


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # the rejected handshakes these tests cause on purpose


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if not shutil.which("openssl"):
        pytest.fail("openssl is missing (it makes the certificate): apt-get install openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_receiver(certificate) -> Iterator[Receiver]:
    cert, key = certificate
    rec = Receiver(url="")
    server = QuietServer(("127.0.0.1", 0), handler_for(rec))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    rec.url = f"https://localhost:{server.server_port}/hook"
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield rec
    server.shutdown()
    server.server_close()


def test_it_delivers_over_https_to_a_trusted_certificate(
    tls_receiver, certificate, allow_private, message
):
    trusted = ssl.create_default_context(cafile=str(certificate[0]))

    result = WebhookTransport(tls=trusted).notify({"url": tls_receiver.url, **CONFIG}, message)

    assert result.status_code == 200
    assert tls_receiver.requests[0].headers["Host"] == tls_receiver.url.split("/")[2]


def test_an_untrusted_certificate_is_a_retryable_error(tls_receiver, allow_private, message):
    with pytest.raises(TransportError) as caught:
        WebhookTransport().notify({"url": tls_receiver.url, **CONFIG}, message)

    assert not caught.value.permanent
    assert str(caught.value).startswith("TLS certificate rejected: ")
    assert tls_receiver.requests == []


def test_a_certificate_for_another_name_is_rejected(
    tls_receiver, certificate, allow_private, message
):
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    url = tls_receiver.url.replace("localhost", "127.0.0.1")

    with pytest.raises(TransportError) as caught:
        WebhookTransport(tls=trusted).notify({"url": url, **CONFIG}, message)

    assert "TLS certificate rejected" in str(caught.value)
