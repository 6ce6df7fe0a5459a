-- named_kinds.absent_gpus_sql (gpu_lost)
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(reported_since)s = 2026-05-04T11:59:05+00:00
--   %(removed_since)s = 2026-05-03T12:00:05+00:00
SELECT g.id, g.host_id
FROM fleet_gpu g
JOIN fleet_host h ON h.id = g.host_id
WHERE NOT g.present AND h.last_seen > %(reported_since)s
  AND g.removed_at > %(removed_since)s
