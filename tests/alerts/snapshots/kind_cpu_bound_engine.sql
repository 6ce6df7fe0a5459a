-- named_kinds.cpu_bound_engine
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(since)s = 2026-05-04T11:58:00+00:00
--   %(threshold)s = 95
--   %(gpu_util_below)s = 85.0
WITH p AS (
  SELECT x.engine_id, max(x.cpu) AS cpu
  FROM (
    SELECT s.engine_id, s.pid, (sum(s.cpu_pct_sum) FILTER (WHERE s.ts >= %(since)s) / NULLIF(sum(s.cpu_pct_n) FILTER (WHERE s.ts >= %(since)s), 0)) AS cpu
    FROM alerts_slice_proc s
    WHERE s.ts >= %(since)s AND s.engine_id IS NOT NULL AND s.shard = 2001
    GROUP BY 1, 2) x
  GROUP BY 1),
gu AS (
  SELECT e.id AS engine_id, (sum(s.util_pct_sum) FILTER (WHERE s.ts >= %(since)s) / NULLIF(sum(s.util_pct_n) FILTER (WHERE s.ts >= %(since)s), 0)) AS util
  FROM fleet_engine e JOIN fleet_gpu g ON g.host_id = e.host_id AND g.present AND e.gpu_uuids ? g.uuid
  JOIN alerts_slice_gpu s ON s.gpu_id = g.id AND s.ts >= %(since)s AND s.shard = 2001
  WHERE e.present AND mod(coalesce(e.host_id, 0), 2) = 1
  GROUP BY 1)
SELECT 'engine:' || e.id, e.host_id, e.id, NULL::int, p.cpu
FROM p
JOIN gu ON gu.engine_id = p.engine_id
JOIN fleet_engine e ON e.id = p.engine_id
WHERE p.cpu >= %(threshold)s AND gu.util < %(gpu_util_below)s
