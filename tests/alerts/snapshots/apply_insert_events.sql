-- apply.INSERT_EVENTS_SQL: the transitions, one INSERT
-- binds: alert_id, at, from_state, to_state, value (given where it runs)
INSERT INTO alerts_alertevent (alert_id, at, from_state, to_state, value, note)
SELECT u.alert_id, %(at)s, u.from_state, u.to_state, u.value, ''
FROM unnest(%(alert_id)s::int8[], %(from_state)s::text[], %(to_state)s::text[], %(value)s::float8[])
  AS u(alert_id, from_state, to_state, value)
