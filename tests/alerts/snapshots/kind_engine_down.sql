-- named_kinds.engine_down
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(since)s = 2026-05-04T11:59:30+00:00
--   %(reported_since)s = 2026-05-04T11:59:35+00:00
SELECT 'engine:' || e.id, e.host_id, e.id, NULL::int, coalesce(u.up, 0)::float8
FROM fleet_engine e
JOIN fleet_host h ON h.id = e.host_id
LEFT JOIN (
  SELECT s.engine_id, (max(ARRAY[extract(epoch FROM s.t1), s.up_last]) FILTER (WHERE s.ts >= %(since)s AND s.up_last IS NOT NULL))[2] AS up
  FROM alerts_slice_engine s
  WHERE s.ts >= %(since)s AND s.shard = 2001
  GROUP BY 1) u ON u.engine_id = e.id
WHERE e.present AND h.last_seen > %(reported_since)s AND coalesce(u.up, 0) = 0
  AND mod(coalesce(h.id, 0), 2) = 1
