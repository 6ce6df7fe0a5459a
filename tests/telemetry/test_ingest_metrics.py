"""The ingest path counts what it did (``/metrics``): each outcome once, under its name, and
a refusal under its reason, through the real ingest app on real PostgreSQL."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY

from tests.telemetry.factories import NOTHING, batch, sample, stored_rows


class Counts:
    """The metric values a test moves, read before and after (the registry is the process's:
    other tests have counted already)."""

    def __init__(self) -> None:
        self.before = self.read()

    @staticmethod
    def read() -> dict[tuple, float]:
        out = {}
        for family in REGISTRY.collect():
            if family.name.startswith("pitwall_ingest"):
                for s in family.samples:
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def moved(self) -> dict[tuple, float]:
        after = self.read()
        return {key: value - self.before.get(key, 0.0) for key, value in after.items()
                if value != self.before.get(key, 0.0)}


def key(name: str, **labels) -> tuple:
    return (name, tuple(sorted(labels.items())))


def present_values(s: dict) -> int:
    """The values a factory sample carries, counted from the sample itself: every field but
    the identifiers; a histogram stores three (layout, counts, sum); a process row carries
    the engine it serves as its engine_id."""
    def fields(d: dict, ident: str) -> int:
        return sum(3 if isinstance(v, dict) else 1 for k, v in d.items() if k != ident)
    return (fields(s["host"], "") + sum(fields(g, "uuid") for g in s["gpus"])
            + sum(fields(e, "name") for e in s["engines"])
            + sum(fields(p, "pid") for p in s["processes"]))


def test_a_stored_batch_counts_its_request_batch_rows_values_and_flush(ingest, host_token):
    counts = Counts()
    one = sample(time.time() - 2)
    assert ingest.post(batch(samples=[one]), host_token)[0] == 200
    moved = counts.moved()
    assert moved[key("pitwall_ingest_requests_total", outcome="ok")] == 1
    assert moved[key("pitwall_ingest_batches_total", outcome="stored")] == 1
    assert {e: moved.get(key("pitwall_ingest_rows_total", entity=e)) for e in NOTHING} == \
        stored_rows() == {"host": 1, "gpu": 2, "engine": 1, "proc": 1}
    assert moved[key("pitwall_ingest_values_total")] == present_values(one)
    assert moved[key("pitwall_ingest_flush_seconds_count")] == 1
    assert REGISTRY.get_sample_value("pitwall_ingest_writer_queue_batches") == 0


def test_a_replay_counts_as_a_duplicate_and_stores_nothing_more(ingest, host_token):
    body = batch(seq=1)
    ingest.post(body, host_token)
    counts = Counts()
    assert ingest.post(body, host_token)[1]["duplicates"] == 1
    moved = counts.moved()
    assert moved[key("pitwall_ingest_batches_total", outcome="duplicate")] == 1
    assert key("pitwall_ingest_batches_total", outcome="stored") not in moved
    assert key("pitwall_ingest_values_total") not in moved


def test_a_spool_replay_of_several_batches_counts_once_as_a_replay(ingest, host_token):
    boot = batch()["agent"]["boot_id"]
    body = {"protocol": 1, "batches": [
        batch(seq=seq, boot_id=boot, samples=[sample(time.time() - 10 + seq)])
        for seq in (1, 2, 3)]}
    counts = Counts()
    code, reply = ingest.post(body, host_token)
    assert code == 200, reply
    moved = counts.moved()
    assert moved[key("pitwall_ingest_spool_replays_total")] == 1
    assert moved[key("pitwall_ingest_batches_total", outcome="stored")] == 3


def test_refusals_are_counted_by_reason_and_store_nothing(ingest, host_token):
    counts = Counts()
    bad_value = batch()
    bad_value["samples"][0]["gpus"][0]["util_pct"] = "busy"
    future = batch(samples=[sample(time.time() + 3600)])
    assert ingest.post(bad_value, host_token)[0] == 400
    assert ingest.post(future, host_token)[0] == 400
    assert ingest.post(batch(), token=None)[0] == 401
    assert ingest.post(raw=b"{}", token=host_token,
                       headers={"content-type": "text/plain"})[0] == 415
    moved = counts.moved()
    assert moved[key("pitwall_ingest_requests_total", outcome="refused")] == 4
    assert {reason: moved.get(key("pitwall_ingest_refused_batches_total", reason=reason))
            for reason in ("invalid", "clock", "unauthorized", "unsupported_media_type")} == {
        "invalid": 1, "clock": 1, "unauthorized": 1, "unsupported_media_type": 1}
    assert key("pitwall_ingest_batches_total", outcome="stored") not in moved
    assert stored_rows() == NOTHING


def test_storage_down_counts_unavailable(ingest, host_token):
    writer = ingest.app.writer
    ingest.run(writer._reset_connection())
    writer.dsn = "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=2"
    counts = Counts()
    assert ingest.post(batch(seq=1), host_token)[0] == 503
    moved = counts.moved()
    assert moved[key("pitwall_ingest_requests_total", outcome="unavailable")] == 1
    assert moved[key("pitwall_ingest_batches_total", outcome="unavailable")] == 1
    assert key("pitwall_ingest_flush_seconds_count") not in moved
