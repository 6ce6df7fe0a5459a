"""Alertmanager's API: Pitwall posts its alerts as Prometheus does, to ``/api/v2/alerts``.

Kind ``alertmanager_api``. Alertmanager then groups, inhibits, silences and routes them with
the alerts Prometheus sends. As a Prometheus client does, every post goes to every
Alertmanager of the channel (an HA pair dedups by itself); the attempt succeeds when at least
one accepted it. A firing alert is sent with ``endsAt`` a few resend intervals ahead, computed
when sent: Alertmanager resolves it on its own if Pitwall stops re-sending (the re-sending is
dispatch's: delivery/feeds.py). A resolved alert is sent with its resolve time.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from .base import ConfigError, DeliveryResult, TransportError
from .httpbase import USER_AGENT, HttpTransport, post, validate_url
from .message import Alert, Notification, rfc3339

MAX_URLS = 8
RESEND_DEFAULT_S, RESEND_MIN_S, RESEND_MAX_S = 60, 10, 600
# Prometheus: endsAt = now + 4 × resend_delay (rules.Manager's ResendDelay, 1 min).
ENDS_AFTER_RESENDS = 4
# The test alert resolves on its own soon: nothing re-sends it.
TEST_ALERT_LIFETIME = timedelta(minutes=5)
MAX_EXTERNAL_LABELS = 16
MAX_LABEL_NAME_CHARS, MAX_LABEL_VALUE_CHARS = 100, 1000
MAX_TOKEN_CHARS = 4096
# Alertmanager 0.25 takes Prometheus' classic label names only.
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
OUTCOME_CHARS = 120


def label_name(name: str) -> str:
    """A label name Alertmanager accepts: other characters become "_" (as Prometheus' own
    sanitising does); a leading digit gets a "_" before it."""
    clean = re.sub(r"[^a-zA-Z0-9_]", "_", name)
    return clean if LABEL_NAME.fullmatch(clean) else f"_{clean}"


def validate_urls(config: dict[str, Any]) -> list[str]:
    urls = config.get("urls")
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not urls:
        raise ConfigError("urls", "at least one Alertmanager URL is required, "
                                  'e.g. ["http://am-1:9093", "http://am-2:9093"]')
    if len(urls) > MAX_URLS:
        raise ConfigError("urls", f"at most {MAX_URLS} Alertmanagers")
    cleaned: list[str] = []
    for index, url in enumerate(urls):
        field = f"urls[{index}]"
        url = validate_url({field: url}, field).rstrip("/")
        if url in cleaned:
            raise ConfigError(field, f"repeats urls[{cleaned.index(url)}]")
        cleaned.append(url)
    return cleaned


def validate_resend(config: dict[str, Any]) -> int:
    resend = config.get("resend_s", RESEND_DEFAULT_S)
    if (isinstance(resend, bool) or not isinstance(resend, int)
            or not RESEND_MIN_S <= resend <= RESEND_MAX_S):
        raise ConfigError("resend_s", f"whole seconds, {RESEND_MIN_S} to {RESEND_MAX_S}")
    return resend


def validate_external_labels(config: dict[str, Any]) -> dict[str, str]:
    labels = config.get("external_labels", {})
    if not isinstance(labels, dict) or len(labels) > MAX_EXTERNAL_LABELS:
        raise ConfigError("external_labels",
                          f"an object of at most {MAX_EXTERNAL_LABELS} label: value pairs")
    for name, value in labels.items():
        if len(name) > MAX_LABEL_NAME_CHARS or not LABEL_NAME.fullmatch(name):
            raise ConfigError(f"external_labels.{name[:MAX_LABEL_NAME_CHARS]}",
                              f"is not a label name ([a-zA-Z_]…, at most "
                              f"{MAX_LABEL_NAME_CHARS} characters)")
        if not isinstance(value, str) or not 0 < len(value) <= MAX_LABEL_VALUE_CHARS:
            raise ConfigError(f"external_labels.{name}", f"must be a string of 1 to "
                                                         f"{MAX_LABEL_VALUE_CHARS} characters")
    return dict(labels)


def ends_at(alert: Alert, resend_s: int, now: datetime, test: bool) -> datetime:
    if alert.status == "resolved":
        end = alert.ends_at or now
    elif test:
        end = now + TEST_ALERT_LIFETIME
    else:
        end = now + timedelta(seconds=ENDS_AFTER_RESENDS * resend_s)
    return max(end, alert.starts_at)  # Alertmanager refuses an end before the start


def postable_alert(alert: Alert, config: dict[str, Any], now: datetime,
                   test: bool = False) -> dict[str, Any]:
    """One alert of ``POST /api/v2/alerts`` (Alertmanager's PostableAlert)."""
    labels = {label_name(k): v for k, v in alert.labels.items() if v != ""}
    for name, value in config.get("external_labels", {}).items():
        labels.setdefault(name, value)  # the alert's own labels win, as in Prometheus
    annotations = {k: v for k, v in alert.annotations.items() if v}
    if alert.generator_url:
        annotations.setdefault("pitwall_url", alert.generator_url)
    return {
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(alert.starts_at),
        "endsAt": rfc3339(ends_at(alert, config["resend_s"], now, test)),
        "generatorURL": alert.generator_url,
    }


def shown(url: str) -> str:
    """What a detail may say of a URL: host and port (paths and credentials may be secret)."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


class AlertmanagerApiTransport(HttpTransport):
    label = "Alertmanager (API v2)"

    def validate_config(self, config: dict[str, Any]) -> dict[str, Any]:
        cleaned: dict[str, Any] = {
            "urls": validate_urls(config),
            "resend_s": validate_resend(config),
        }
        labels = validate_external_labels(config)
        if labels:
            cleaned["external_labels"] = labels
        token = config.get("bearer_token")
        if token is not None and (not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS
                                  or any(c in token for c in "\r\n")):
            raise ConfigError("bearer_token", f"a string of at most {MAX_TOKEN_CHARS} "
                                              "characters, on one line")
        if token:
            cleaned["bearer_token"] = token
        return cleaned

    def payload(self, config: dict[str, Any], message: Notification,
                now: datetime | None = None) -> list[dict[str, Any]]:  # type: ignore[override]
        now = now or datetime.now(UTC)
        return [postable_alert(a, config, now, message.test) for a in message.alerts]

    def notify(self, channel_config: dict[str, Any], message: Notification) -> DeliveryResult:
        config = self.checked(channel_config)
        body = json.dumps(self.payload(config, message), separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
                   "X-Pitwall-Notification-Id": message.id}
        if config.get("bearer_token"):
            headers["Authorization"] = f"Bearer {config['bearer_token']}"
        outcomes: list[tuple[str, DeliveryResult | TransportError]] = []
        for url in config["urls"]:
            try:
                outcome: DeliveryResult | TransportError = post(
                    f"{url}/api/v2/alerts", body, headers, self.timeout, self.tls)
            except TransportError as exc:
                outcome = exc
            outcomes.append((shown(url), outcome))
        return combine(outcomes)


def combine(outcomes: list[tuple[str, DeliveryResult | TransportError]]) -> DeliveryResult:
    """Delivered when one Alertmanager accepted; else retryable unless every failure is
    permanent. The detail names each Alertmanager's outcome, by host."""
    parts = []
    for host, outcome in outcomes:
        text = outcome.detail if isinstance(outcome, DeliveryResult) else f"failed: {outcome}"
        parts.append(f"{host} {text[:OUTCOME_CHARS]}")
    detail = "; ".join(parts)
    sent = [o for _, o in outcomes if isinstance(o, DeliveryResult)]
    if sent:
        return DeliveryResult(detail=detail, status_code=sent[0].status_code)
    errors = [o for _, o in outcomes if isinstance(o, TransportError)]
    waits = [e.retry_after for e in errors if e.retry_after]
    raise TransportError(detail, permanent=all(e.permanent for e in errors),
                         status_code=errors[0].status_code, retry_after=max(waits, default=None))
