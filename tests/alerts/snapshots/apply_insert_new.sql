-- apply.INSERT_NEW_SQL: the new alerts, one INSERT
-- binds: ack_comment, acknowledged_at, acknowledged_by, active_since, engine_id, fingerprint, gpu_id, host_id, labels, last_evaluated_at, last_true_at, resolved_at, rule_id, started_at, state, summary, target, value (given where it runs)
INSERT INTO alerts_alert (rule_id, target, host_id, engine_id, gpu_id, labels, fingerprint, state, value, summary, active_since, started_at, resolved_at, last_true_at, last_evaluated_at, acknowledged_at, acknowledged_by, ack_comment)
SELECT u.rule_id, u.target, u.host_id, u.engine_id, u.gpu_id, u.labels, u.fingerprint, u.state, u.value, u.summary, ('epoch'::timestamptz + u.active_since * interval '1 microsecond'), ('epoch'::timestamptz + u.started_at * interval '1 microsecond'), ('epoch'::timestamptz + u.resolved_at * interval '1 microsecond'), ('epoch'::timestamptz + u.last_true_at * interval '1 microsecond'), ('epoch'::timestamptz + u.last_evaluated_at * interval '1 microsecond'), ('epoch'::timestamptz + u.acknowledged_at * interval '1 microsecond'), u.acknowledged_by, u.ack_comment
FROM unnest(
  %(rule_id)s::int8[],
  %(target)s::text[],
  %(host_id)s::int4[],
  %(engine_id)s::int4[],
  %(gpu_id)s::int4[],
  %(labels)s::jsonb[],
  %(fingerprint)s::text[],
  %(state)s::text[],
  %(value)s::float8[],
  %(summary)s::text[],
  %(active_since)s::int8[],
  %(started_at)s::int8[],
  %(resolved_at)s::int8[],
  %(last_true_at)s::int8[],
  %(last_evaluated_at)s::int8[],
  %(acknowledged_at)s::int8[],
  %(acknowledged_by)s::text[],
  %(ack_comment)s::text[])
  AS u(rule_id, target, host_id, engine_id, gpu_id, labels, fingerprint, state, value, summary, active_since, started_at, resolved_at, last_true_at, last_evaluated_at, acknowledged_at, acknowledged_by, ack_comment)
RETURNING id, rule_id, target
