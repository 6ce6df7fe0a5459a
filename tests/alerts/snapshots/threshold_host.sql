-- queries.entity_query: one avg rule on hosts, the whole fleet
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(start_60s)s = 2026-05-04T11:59:00+00:00
--   %(threshold_1)s = 75
WITH b AS (
  SELECT host_id, CASE WHEN s.ts >= %(start_60s)s THEN 0 END AS band,
    sum(s.cpu_pct_sum) AS cpu_pct_sum,
    sum(s.cpu_pct_n) AS cpu_pct_n
  FROM alerts_slice_host s
  WHERE s.ts >= %(start_60s)s AND s.shard = 1000
  GROUP BY host_id, band),
a AS (
  SELECT host_id,
    ((sum(b.cpu_pct_sum) FILTER (WHERE b.band <= 0) / NULLIF(sum(b.cpu_pct_n) FILTER (WHERE b.band <= 0), 0)))::float8 AS v0
  FROM b
  GROUP BY host_id)
SELECT r.i, 'host:' || t.host_id, t.host_id, NULL::int, NULL::int, (ARRAY[x.v1])[r.i]
FROM (SELECT * FROM (SELECT id AS host_id FROM fleet_host) r WHERE true) t
LEFT JOIN a ON a.host_id = t.host_id
CROSS JOIN LATERAL (SELECT
    (a.v0)::float8 AS v1
  OFFSET 0) x
CROSS JOIN LATERAL unnest(array_remove(ARRAY[
    CASE WHEN x.v1 > %(threshold_1)s::float8 THEN 1 END], NULL)) AS r(i)
