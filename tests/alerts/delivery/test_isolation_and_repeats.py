"""A slow or busy channel does not hold back the others; every attempt waits on its
receiver for ALERT_DELIVERY_TIMEOUT_S; an attempt repeated after a lease ran out (a killed
worker) carries the notification's id again. Real receivers, a real PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from aiosmtpd.controller import Controller
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.dispatch import dispatch
from controlplane.alerts.delivery.models import Channel, DeliveryState, Notification
from controlplane.alerts.transports import EmailTransport, WebhookTransport
from controlplane.alerts.transports.email import message_id
from tests.alerts.delivery.helpers import at, fire
from tests.support.live import free_port
from tests.support.polling import wait_until
from tests.support.receivers import Inbox


@pytest.fixture
def email(db, smtp_inbox) -> Channel:
    return service.create_channel(name="mail", kind="email", config={"to": ["ops@example.com"]})


@contextmanager
def other_session() -> Iterator[psycopg.Connection]:
    """A second PostgreSQL session on the test database: another worker, as the server sees it."""
    params = connection.get_connection_params()
    keys = ("dbname", "host", "port", "user", "password")
    conn = psycopg.connect(**{k: params[k] for k in keys if params.get(k)}, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


def take_turn(session: psycopg.Connection, channel: Channel) -> bool:
    row = session.execute("SELECT pg_try_advisory_lock(hashtext(%s), %s)",
                          [service.TURN_LOCK_NAME, channel.id]).fetchone()
    return bool(row and row[0])


def test_a_channel_busy_in_another_worker_is_skipped_and_the_others_are_delivered(
        webhook, email, receiver, smtp_inbox):
    fire("KVCacheFull")
    dispatch(at(30))
    with other_session() as worker:
        assert take_turn(worker, webhook)  # another worker is attempting one of its rows

        service.deliver_due(at(31))

        assert len(smtp_inbox.messages) == 1
        assert receiver.requests == []
        webhook_row = Notification.objects.get(channel=webhook)
        assert (webhook_row.state, webhook_row.attempts) == (DeliveryState.PENDING, 0)
    # That worker's session ended (killed, or done): its turn is free at once, no lease to wait.
    service.deliver_due(at(32))

    assert [r.headers["X-Pitwall-Notification-Id"] for r in receiver.requests] == [
        str(webhook_row.uuid)]
    assert len(smtp_inbox.messages) == 1  # the e-mail was not sent again


@pytest.mark.django_db(transaction=True)
def test_email_goes_out_while_a_slow_webhook_attempt_is_in_flight(
        receiver, smtp_inbox, allow_private):
    hook = service.create_channel(name="slow", kind="webhook",
                                  config={"url": receiver.url, "secret": "whsec-slow-1"})
    mail = service.create_channel(name="mail", kind="email", config={"to": ["ops@example.com"]})
    receiver.delay = 3.0
    fire("KVCacheFull")
    dispatch()
    slow = threading.Thread(target=deliver_in_own_session, args=(hook.id,))
    slow.start()
    try:
        wait_until(lambda: len(receiver.requests) == 1, 10, "the webhook attempt did not start")

        assert service.deliver_channel(hook.id) is None  # busy: skipped, not attempted twice
        [sent] = service.deliver_channel(mail.id)

        assert sent.state == DeliveryState.SENT and len(smtp_inbox.messages) == 1
        # The e-mail was delivered while the webhook's one request was still unanswered.
        assert Notification.objects.get(channel=hook).state == DeliveryState.SENDING
    finally:
        slow.join(30)
    assert Notification.objects.get(channel=hook).state == DeliveryState.SENT
    assert len(receiver.requests) == 1


def deliver_in_own_session(channel_id: int) -> None:
    try:
        service.deliver_channel(channel_id)  # a thread has its own database connection
    finally:
        connection.close()


def test_a_receiver_slower_than_the_timeout_setting_times_out(
        webhook, receiver, settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_DELIVERY_TIMEOUT_S": 1}
    receiver.delay = 2.0
    fire("KVCacheFull")
    [row_id] = dispatch(at(30))

    row = service.deliver(row_id, at(30))

    assert row.state == DeliveryState.RETRYING
    assert row.last_error == "timed out after 1 s"


def test_a_receiver_within_the_timeout_setting_is_slow_not_failing(webhook, receiver, settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_DELIVERY_TIMEOUT_S": 4}
    receiver.delay = 2.0
    fire("KVCacheFull")
    [row_id] = dispatch(at(30))

    row = service.deliver(row_id, at(30))

    assert (row.state, row.detail) == (DeliveryState.SENT, "HTTP 200: ok")


def test_every_transport_takes_its_timeout_from_the_setting(settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_DELIVERY_TIMEOUT_S": 17}
    assert WebhookTransport().timeout == EmailTransport().timeout == 17.0
    assert WebhookTransport(timeout=0.5).timeout == 0.5


class SlowInbox(Inbox):
    """Answers DATA after ``delay`` seconds."""

    delay = 2.0

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802
        await asyncio.sleep(self.delay)
        return await super().handle_DATA(server, session, envelope)


@pytest.fixture
def slow_smtp(smtp_inbox, settings) -> Iterator[SlowInbox]:
    inbox = SlowInbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_PORT = controller.port
    yield inbox
    controller.stop()


@pytest.mark.parametrize("timeout_s, delivered", [(1, False), (4, True)])
def test_an_smtp_server_is_given_the_timeout_setting(db, slow_smtp, settings, timeout_s,
                                                    delivered):
    settings.PITWALL = {**settings.PITWALL, "ALERT_DELIVERY_TIMEOUT_S": timeout_s}
    channel = service.create_channel(name="mail", kind="email", config={"to": ["a@example.com"]})
    fire("KVCacheFull")
    dispatch(at(30))

    [row] = service.deliver_channel(channel.id, at(30))

    assert (row.state == DeliveryState.SENT) is delivered
    assert len(slow_smtp.messages) == int(delivered)
    if not delivered:
        assert "timed out" in row.last_error


def test_the_lease_is_derived_from_the_timeout_and_a_shorter_one_is_refused(settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_DELIVERY_TIMEOUT_S": 60}
    assert service.lease_s() == 4 * 60
    settings.PITWALL = {**settings.PITWALL, "ALERT_DELIVERY_LEASE_S": 45}
    with pytest.raises(ImproperlyConfigured, match="ALERT_DELIVERY_TIMEOUT_S"):
        service.lease_s()
    settings.PITWALL = {**settings.PITWALL, "ALERT_DELIVERY_LEASE_S": 75}
    assert service.lease() == timedelta(seconds=75)


def killed_mid_attempt(row_id: int, now, transport) -> None:
    """What a worker SIGKILLed after its receiver took the notification leaves: the row
    claimed ("sending", leased), the receiver holding one copy, no outcome recorded."""
    assert service.claim(row_id, now)
    row = Notification.objects.select_related("channel").get(id=row_id)
    transport.notify(row.channel.config, service.message_from_payload(row.payload))


def test_a_webhook_repeat_after_the_lease_ran_out_carries_the_same_id_and_body(
        webhook, receiver):
    fire("KVCacheFull")
    [row_id] = dispatch(at(30))
    killed_mid_attempt(row_id, at(30), WebhookTransport())

    assert service.deliver_due(at(30) + service.lease() - timedelta(seconds=1)) == []
    [row] = service.deliver_due(at(30) + service.lease())

    first, repeat = receiver.requests
    assert (row.state, row.attempts) == (DeliveryState.SENT, 2)
    assert first.headers["X-Pitwall-Notification-Id"] == str(row.uuid)
    assert repeat.headers["X-Pitwall-Notification-Id"] == str(row.uuid)
    assert first.json() == repeat.json() and repeat.json()["id"] == str(row.uuid)


def test_an_email_repeat_after_the_lease_ran_out_has_the_same_message_id(email, smtp_inbox):
    fire("KVCacheFull")
    [row_id] = dispatch(at(30))
    killed_mid_attempt(row_id, at(30), EmailTransport())

    [row] = service.deliver_due(at(30) + service.lease())

    first, repeat = smtp_inbox.messages
    assert first["Message-ID"] == repeat["Message-ID"] == message_id(str(row.uuid))
    assert first["X-Pitwall-Notification-Id"] == repeat["X-Pitwall-Notification-Id"]
    assert row.state == DeliveryState.SENT


def test_a_repeat_that_fails_is_retried_with_the_same_id(webhook, receiver):
    fire("KVCacheFull")
    [row_id] = dispatch(at(30))
    killed_mid_attempt(row_id, at(30), WebhookTransport())
    receiver.status = 500

    [row] = service.deliver_due(at(30) + service.lease())
    assert row.state == DeliveryState.RETRYING
    receiver.status = 200
    service.deliver_due(row.next_attempt_at)

    ids = {r.headers["X-Pitwall-Notification-Id"] for r in receiver.requests}
    assert ids == {str(row.uuid)} and len(receiver.requests) == 3
