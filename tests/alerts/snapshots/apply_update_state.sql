-- apply.UPDATE_STATE_SQL: the changed alerts, one UPDATE
-- binds: ack_comment, acknowledged_at, acknowledged_by, active_since, id, last_evaluated_at, last_true_at, resolved_at, started_at, state, summary, value (given where it runs)
UPDATE alerts_alert a
SET state = u.state, value = u.value, summary = u.summary, active_since = ('epoch'::timestamptz + u.active_since * interval '1 microsecond'), started_at = ('epoch'::timestamptz + u.started_at * interval '1 microsecond'), resolved_at = ('epoch'::timestamptz + u.resolved_at * interval '1 microsecond'), last_true_at = ('epoch'::timestamptz + u.last_true_at * interval '1 microsecond'), last_evaluated_at = ('epoch'::timestamptz + u.last_evaluated_at * interval '1 microsecond'), acknowledged_at = ('epoch'::timestamptz + u.acknowledged_at * interval '1 microsecond'), acknowledged_by = u.acknowledged_by, ack_comment = u.ack_comment
FROM unnest(
  %(id)s::int8[],
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
  AS u(id, state, value, summary, active_since, started_at, resolved_at, last_true_at, last_evaluated_at, acknowledged_at, acknowledged_by, ack_comment)
WHERE a.id = u.id
