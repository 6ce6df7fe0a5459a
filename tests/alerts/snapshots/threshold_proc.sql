-- queries.entity_query: processes, whose targets are the ones with slices in the window
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(start_30s)s = 2026-05-04T11:59:30+00:00
--   %(start_120s)s = 2026-05-04T11:58:00+00:00
--   %(threshold_1)s = 95
--   %(threshold_2)s = 99
WITH b AS (
  SELECT host_id, pid, CASE WHEN s.ts >= %(start_120s)s THEN 0 END AS band,
    sum(s.cpu_pct_sum) AS cpu_pct_sum,
    sum(s.cpu_pct_n) AS cpu_pct_n
  FROM alerts_slice_proc s
  WHERE s.ts >= %(start_120s)s AND s.shard = 1000
  GROUP BY host_id, pid, band),
a AS (
  SELECT host_id, pid,
    ((sum(b.cpu_pct_sum) FILTER (WHERE b.band <= 0) / NULLIF(sum(b.cpu_pct_n) FILTER (WHERE b.band <= 0), 0)))::float8 AS v0
  FROM b
  GROUP BY host_id, pid)
SELECT r.i, 'proc:' || t.host_id || ':' || t.pid, t.host_id, t.engine_id, NULL::int, (ARRAY[x.v1, x.v2])[r.i]
FROM (SELECT host_id, pid, max(engine_id) AS engine_id FROM alerts_slice_proc s WHERE ts >= %(start_120s)s AND s.shard = 1000 GROUP BY host_id, pid) t
LEFT JOIN a ON a.host_id = t.host_id AND a.pid = t.pid
LEFT JOIN LATERAL (SELECT * FROM alerts_slice_proc x WHERE x.shard = 1000 AND x.host_id = t.host_id AND x.pid = t.pid ORDER BY x.ts DESC LIMIT 1) l ON true
LEFT JOIN LATERAL (SELECT * FROM alerts_slice_proc x WHERE x.shard = 1000 AND x.host_id = t.host_id AND x.pid = t.pid AND (x.shard, x.host_id, x.pid, x.ts) >= (1000, t.host_id, t.pid, %(start_30s)s) ORDER BY x.ts LIMIT 1) f0 ON true
CROSS JOIN LATERAL (SELECT
    (a.v0)::float8 AS v1,
    (CASE WHEN l.ts >= %(start_30s)s THEN l.cpu_pct_last END)::float8 AS v2
  OFFSET 0) x
CROSS JOIN LATERAL unnest(array_remove(ARRAY[
    CASE WHEN x.v1 >= %(threshold_1)s::float8 THEN 1 END,
    CASE WHEN x.v2 >= %(threshold_2)s::float8 THEN 2 END], NULL)) AS r(i)
