-- named_kinds.memory_beyond_share
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(default_share)s = 0.9
--   %(since)s = 2026-05-04T11:58:00+00:00
--   %(threshold)s = 0.05
WITH share AS (
  SELECT g.id AS gpu_id, g.host_id, g.mem_total_bytes, min(e.id) AS engine_id,
    sum(CASE WHEN e.config->>'gpu_memory_utilization' ~ '^[0-9]*\.?[0-9]+$' THEN (e.config->>'gpu_memory_utilization')::float8 ELSE %(default_share)s END) AS share
  FROM fleet_engine e JOIN fleet_gpu g ON g.host_id = e.host_id AND g.present AND e.gpu_uuids ? g.uuid
  WHERE e.present AND mod(coalesce(e.host_id, 0), 2) = 1
  GROUP BY g.id),
used AS (
  SELECT s.gpu_id, (sum(s.mem_used_bytes_sum) FILTER (WHERE s.ts >= %(since)s) / NULLIF(sum(s.mem_used_bytes_n) FILTER (WHERE s.ts >= %(since)s), 0)) AS used,
    max(s.mem_total_bytes_max) AS total
  FROM alerts_slice_gpu s
  WHERE s.ts >= %(since)s AND s.shard = 2001
  GROUP BY 1),
v AS (
  SELECT s.gpu_id, s.host_id, s.engine_id,
    (u.used - s.share * coalesce(s.mem_total_bytes, u.total))
    / NULLIF(coalesce(s.mem_total_bytes, u.total), 0) AS excess
  FROM share s JOIN used u ON u.gpu_id = s.gpu_id)
SELECT 'gpu:' || v.gpu_id, v.host_id, v.engine_id, v.gpu_id, v.excess
FROM v
WHERE v.excess > %(threshold)s
