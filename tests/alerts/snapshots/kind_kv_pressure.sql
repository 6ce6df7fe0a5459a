-- named_kinds.kv_pressure
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(since)s = 2026-05-04T11:59:00+00:00
--   %(threshold)s = 0.95
--   %(waiting_above)s = 0.0
SELECT 'engine:' || a.engine_id, e.host_id, a.engine_id, NULL::int, a.kv
FROM (
  SELECT s.engine_id,
    (sum(s.kv_cache_usage_sum) FILTER (WHERE s.ts >= %(since)s) / NULLIF(sum(s.kv_cache_usage_n) FILTER (WHERE s.ts >= %(since)s), 0)) AS kv,
    (sum(s.requests_waiting_sum) FILTER (WHERE s.ts >= %(since)s) / NULLIF(sum(s.requests_waiting_n) FILTER (WHERE s.ts >= %(since)s), 0)) AS waiting
  FROM alerts_slice_engine s
  WHERE s.ts >= %(since)s AND s.shard = 2001
  GROUP BY 1) a
JOIN fleet_engine e ON e.id = a.engine_id
WHERE a.kv >= %(threshold)s AND a.waiting > %(waiting_above)s
