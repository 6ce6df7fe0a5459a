"""A real HTTP receiver and a real SMTP server on loopback, for the tests of what Pitwall sends.

A pytest plugin (tests/conftest.py lists it in ``pytest_plugins``): the fixtures ``receiver``,
``allow_private`` and ``smtp_inbox`` are available to every test.
"""

from __future__ import annotations

import email
import email.policy
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.support.live import free_port


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every POST; answers ``status``, ``reply_headers`` and ``reply`` after ``delay`` s."""

    url: str
    requests: list[Request] = field(default_factory=list)
    status: int = 200
    reply: bytes = b"ok"
    delay: float = 0.0
    reply_headers: dict[str, str] = field(default_factory=dict)


def handler_for(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 -- http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            receiver.requests.append(Request(self.path, dict(self.headers.items()), body))
            time.sleep(receiver.delay)
            self.send_response(receiver.status)
            self.send_header("Content-Length", str(len(receiver.reply)))
            for name, value in receiver.reply_headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(receiver.reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving(path: str = "/hook") -> Iterator[Receiver]:
    """A receiver on a free loopback port; its ``url`` ends in ``path``."""
    rec = Receiver(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(rec))
    rec.url = f"http://127.0.0.1:{server.server_port}{path}"
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving() as rec:
        yield rec


@pytest.fixture
def allow_private(settings) -> None:
    """The receivers listen on loopback, which the transports refuse unless told otherwise."""
    settings.PITWALL = {**settings.PITWALL, "ALERT_ALLOW_PRIVATE_WEBHOOKS": True}


class Inbox:
    """aiosmtpd handler: keeps what arrives; ``rcpt_reply``/``data_reply`` set other answers."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []
        self.envelopes: list[Any] = []
        self.rcpt_reply = "250 OK"
        self.data_reply = "250 Message accepted"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options) -> str:  # noqa: N802
        if self.rcpt_reply.startswith("250"):
            envelope.rcpt_tos.append(address)
        return self.rcpt_reply

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        if not self.data_reply.startswith("250"):
            return self.data_reply
        self.envelopes.append(envelope)
        self.messages.append(
            email.message_from_bytes(envelope.content, policy=email.policy.default)
        )
        return self.data_reply


@pytest.fixture
def smtp_inbox(settings) -> Iterator[Inbox]:
    """A real SMTP server (aiosmtpd) with Django's SMTP backend pointed at it."""
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    # pytest-django swaps in the locmem backend: these tests want the real SMTP client.
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.DEFAULT_FROM_EMAIL = "pitwall@example.com"
    yield inbox
    controller.stop()
