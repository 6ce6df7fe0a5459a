"""One round trip per ingest flush for idempotency and liveness (see ingest/writer.py).

``pitwall_claim_streams`` locks the agent streams a flush touches, in key order, returns each
stream's highest stored seq from before this flush, raises it, and refreshes last_seen of the
hosts and engines named. The writer stores only the batches above the returned seq, in the same
transaction, so replays racing their original are stored once.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION pitwall_claim_streams(
    hosts int[], boots uuid[], seqs int8[], versions text[], seen_hosts int[], seen_engines int[])
RETURNS TABLE(host_id int, boot_id uuid, previous int8)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO telemetry_agentstream AS s
        (host_id, boot_id, max_seq, agent_version, first_seen, last_seen)
    SELECT v.h, v.b, 0, '', now(), now() FROM unnest(hosts, boots) AS v(h, b)
    ON CONFLICT ON CONSTRAINT agent_stream_unique DO NOTHING;
    RETURN QUERY
    WITH locked AS (
        SELECT s.host_id, s.boot_id, s.max_seq FROM telemetry_agentstream s
        JOIN unnest(hosts, boots) AS v(h, b) ON s.host_id = v.h AND s.boot_id = v.b
        ORDER BY s.host_id, s.boot_id
        FOR UPDATE OF s
    ), raised AS (
        UPDATE telemetry_agentstream s
        SET max_seq = greatest(s.max_seq, v.m), agent_version = v.a, last_seen = now()
        FROM unnest(hosts, boots, seqs, versions) AS v(h, b, m, a), locked l
        WHERE s.host_id = v.h AND s.boot_id = v.b AND l.host_id = v.h AND l.boot_id = v.b
    )
    SELECT l.host_id, l.boot_id, l.max_seq FROM locked l;
    IF cardinality(seen_hosts) > 0 THEN
        UPDATE fleet_host SET last_seen = now() WHERE id = ANY(seen_hosts);
    END IF;
    IF cardinality(seen_engines) > 0 THEN
        UPDATE fleet_engine SET last_seen = now() WHERE id = ANY(seen_engines);
    END IF;
END
$$;
"""

DROP = "DROP FUNCTION IF EXISTS pitwall_claim_streams(int[], uuid[], int8[], text[], int[], int[])"


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0002_sample_tables"), ("fleet", "0001_initial")]
    operations = [migrations.RunSQL(CREATE, DROP)]
