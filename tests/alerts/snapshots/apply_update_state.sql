-- apply.UPDATE_STATE_SQL: the changed alerts, one UPDATE
-- binds: ack_comment, acknowledged_at, acknowledged_by, active_since, id, last_evaluated_at, last_true_at, resolved_at, started_at, state, summary, value (given where it runs)
UPDATE alerts_alert a
SET state = u.state, value = u.value, summary = u.summary, active_since = u.active_since, started_at = u.started_at, resolved_at = u.resolved_at, last_true_at = u.last_true_at, last_evaluated_at = u.last_evaluated_at, acknowledged_at = u.acknowledged_at, acknowledged_by = u.acknowledged_by, ack_comment = u.ack_comment
FROM unnest(
  %(id)s::int8[],
  %(state)s::text[],
  %(value)s::float8[],
  %(summary)s::text[],
  %(active_since)s::timestamptz[],
  %(started_at)s::timestamptz[],
  %(resolved_at)s::timestamptz[],
  %(last_true_at)s::timestamptz[],
  %(last_evaluated_at)s::timestamptz[],
  %(acknowledged_at)s::timestamptz[],
  %(acknowledged_by)s::text[],
  %(ack_comment)s::text[])
  AS u(id, state, value, summary, active_since, started_at, resolved_at, last_true_at, last_evaluated_at, acknowledged_at, acknowledged_by, ack_comment)
WHERE a.id = u.id
