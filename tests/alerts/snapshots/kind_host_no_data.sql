-- named_kinds.host_no_data_sql
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(now)s = 2026-05-04T12:00:05+00:00
--   %(silent_since)s = 2026-05-04T11:59:05+00:00
SELECT 'host:' || h.id, h.id, NULL::int, NULL::int,
  extract(epoch FROM %(now)s - coalesce(h.last_seen, h.created_at))::float8
FROM fleet_host h
WHERE coalesce(h.last_seen, h.created_at) < %(silent_since)s
