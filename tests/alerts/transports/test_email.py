from __future__ import annotations

from dataclasses import replace

import pytest

from controlplane.alerts.transports import EmailTransport, TransportError, make_test_notification
from controlplane.alerts.transports.base import ConfigError


def parts(mail) -> dict[str, str]:
    return {
        part.get_content_type(): part.get_content()
        for part in mail.walk()
        if not part.is_multipart()
    }


def test_it_delivers_a_text_and_html_mail_through_a_real_smtp_server(smtp_inbox, message):
    result = EmailTransport().notify({"to": ["ops@example.com", "sre@example.com"]}, message)

    assert result.detail == "sent to 2 recipients"
    [envelope] = smtp_inbox.envelopes
    assert envelope.rcpt_tos == ["ops@example.com", "sre@example.com"]
    [mail] = smtp_inbox.messages
    assert (
        mail["Subject"] == "[FIRING:1] KV cache at 97% on gpu-07 with 12 requests waiting (+1 more)"
    )
    assert mail["From"] == "pitwall@example.com"
    assert mail["X-Pitwall-Notification-Id"] == message.id
    bodies = parts(mail)
    assert set(bodies) == {"text/plain", "text/html"}
    assert "FIRING  KV cache at 97% on gpu-07" in bodies["text/plain"]
    assert "RESOLVED  KV cache at 97% on gpu-08" in bodies["text/plain"]
    assert message.alerts[0].generator_url in bodies["text/plain"]
    assert message.id in bodies["text/plain"]


def test_the_html_body_escapes_annotations_and_links_to_the_charts(smtp_inbox, message):
    EmailTransport().notify({"to": "ops@example.com"}, message)

    html = parts(smtp_inbox.messages[0])["text/html"]
    assert "Requests queue &lt;behind&gt; a full cache &amp; preemptions rise." in html
    assert "<behind>" not in html
    assert f'href="{message.alerts[0].generator_url}"' in html


def test_a_resolved_notification_says_so_in_the_subject(smtp_inbox, message):
    resolved = replace(message, status="resolved")

    EmailTransport().notify({"to": ["ops@example.com"]}, resolved)

    assert smtp_inbox.messages[0]["Subject"].startswith("[RESOLVED] ")


def test_a_refused_connection_is_retryable(settings, message):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 1

    with pytest.raises(TransportError) as caught:
        EmailTransport().notify({"to": ["ops@example.com"]}, message)

    assert not caught.value.permanent


@pytest.mark.parametrize(
    "config",
    [{}, {"to": []}, {"to": "not-an-address"}, {"to": ["ops@example.com", "nope"]}],
)
def test_it_rejects_a_config_without_valid_recipients_naming_the_field(config):
    with pytest.raises(ConfigError) as caught:
        EmailTransport().validate_config(config)

    assert caught.value.field == "to"
    assert str(caught.value).startswith("to: ")


def test_it_accepts_a_comma_separated_list_of_recipients():
    config = EmailTransport().validate_config({"to": "ops@example.com, sre@example.com"})

    assert config == {"to": ["ops@example.com", "sre@example.com"]}


def test_the_test_notification_arrives_marked_as_a_test(smtp_inbox):
    EmailTransport().notify({"to": ["ops@example.com"]}, make_test_notification("oncall"))

    [mail] = smtp_inbox.messages
    assert mail["Subject"] == "[TEST] [FIRING:1] Test notification from Pitwall"
    assert "This is a test notification" in parts(mail)["text/plain"]


def test_a_refused_recipient_is_permanent_and_named(smtp_inbox, message):
    smtp_inbox.rcpt_reply = "550 5.1.1 No such mailbox"

    with pytest.raises(TransportError) as caught:
        EmailTransport().notify({"to": ["gone@example.com"]}, message)

    assert caught.value.permanent
    assert str(caught.value) == "SMTP refused the recipients: gone@example.com"


def test_a_temporary_smtp_failure_is_retryable(smtp_inbox, message):
    smtp_inbox.data_reply = "451 4.3.0 Try again later"

    with pytest.raises(TransportError) as caught:
        EmailTransport().notify({"to": ["ops@example.com"]}, message)

    assert not caught.value.permanent
    assert str(caught.value) == "SMTP 451: 4.3.0 Try again later"
