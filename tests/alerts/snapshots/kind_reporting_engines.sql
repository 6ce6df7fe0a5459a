-- named_kinds.reporting_engines_sql (engine_down)
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(reported_since)s = 2026-05-04T11:59:35+00:00
SELECT e.id, e.host_id
FROM fleet_engine e
JOIN fleet_host h ON h.id = e.host_id
WHERE e.present AND h.last_seen > %(reported_since)s
