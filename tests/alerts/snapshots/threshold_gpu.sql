-- queries.entity_query: every aggregation and operator on GPUs, two bitmasks, three aggregate windows (bands), last and rate; lane 2 of 2
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(start_60s)s = 2026-05-04T11:59:00+00:00
--   %(start_120s)s = 2026-05-04T11:58:00+00:00
--   %(start_300s)s = 2026-05-04T11:55:00+00:00
--   %(start_600s)s = 2026-05-04T11:50:00+00:00
--   %(threshold_1)s = 85
--   %(threshold_2)s = 90
--   %(threshold_3)s = 5
--   %(threshold_4)s = 0.5
--   %(threshold_5)s = 0.9
--   %(threshold_6)s = 0
--   %(threshold_7)s = 20
--   %(threshold_8)s = 0
--   %(threshold_9)s = 0
WITH b AS (
  SELECT gpu_id, CASE WHEN s.ts >= %(start_60s)s THEN 0 WHEN s.ts >= %(start_120s)s THEN 1 WHEN s.ts >= %(start_300s)s THEN 2 END AS band,
    sum(s.temp_c_sum) AS temp_c_sum,
    sum(s.temp_c_n) AS temp_c_n,
    max(s.temp_c_max) AS temp_c_max,
    min(s.util_pct_min) AS util_pct_min,
    sum(CASE WHEN cardinality(s.throttle_reasons_vals) = 1 THEN CASE WHEN (s.throttle_reasons_vals[1] & 232) <> 0 THEN s.throttle_reasons_cnts[1] ELSE 0 END ELSE (SELECT sum(u.c) FROM unnest(s.throttle_reasons_vals, s.throttle_reasons_cnts) AS u(v, c) WHERE (u.v & 232) <> 0) END) AS throttle_reasons_hits_232,
    sum(s.throttle_reasons_n) AS throttle_reasons_n,
    sum(CASE WHEN cardinality(s.throttle_reasons_vals) = 1 THEN CASE WHEN (s.throttle_reasons_vals[1] & 4) <> 0 THEN s.throttle_reasons_cnts[1] ELSE 0 END ELSE (SELECT sum(u.c) FROM unnest(s.throttle_reasons_vals, s.throttle_reasons_cnts) AS u(v, c) WHERE (u.v & 4) <> 0) END) AS throttle_reasons_hits_4,
    max(s.xid_last_max) AS xid_last_max,
    sum(s.power_w_sum) AS power_w_sum,
    sum(s.power_w_n) AS power_w_n
  FROM alerts_slice_gpu s
  WHERE s.ts >= %(start_300s)s AND s.shard = 2001
  GROUP BY gpu_id, band),
a AS (
  SELECT gpu_id,
    ((sum(b.temp_c_sum) FILTER (WHERE b.band <= 0) / NULLIF(sum(b.temp_c_n) FILTER (WHERE b.band <= 0), 0)))::float8 AS v0,
    (max(b.temp_c_max) FILTER (WHERE b.band <= 2))::float8 AS v1,
    (min(b.util_pct_min) FILTER (WHERE b.band <= 1))::float8 AS v2,
    ((coalesce(sum(b.throttle_reasons_hits_232) FILTER (WHERE b.band <= 1), 0)::float8 / NULLIF(sum(b.throttle_reasons_n) FILTER (WHERE b.band <= 1), 0)))::float8 AS v3,
    ((coalesce(sum(b.throttle_reasons_hits_4) FILTER (WHERE b.band <= 2), 0)::float8 / NULLIF(sum(b.throttle_reasons_n) FILTER (WHERE b.band <= 2), 0)))::float8 AS v4,
    (max(b.xid_last_max) FILTER (WHERE b.band <= 2))::float8 AS v5,
    ((sum(b.power_w_sum) FILTER (WHERE b.band <= 0) / NULLIF(sum(b.power_w_n) FILTER (WHERE b.band <= 0), 0)))::float8 AS v6
  FROM b
  GROUP BY gpu_id)
SELECT r.i, 'gpu:' || t.gpu_id, t.host_id, NULL::int, t.gpu_id, (ARRAY[x.v1, x.v2, x.v3, x.v4, x.v5, x.v6, x.v7, x.v8, x.v9])[r.i]
FROM (SELECT * FROM (SELECT id AS gpu_id, host_id FROM fleet_gpu) r WHERE mod(coalesce(r.host_id, 0), 2) = 1) t
LEFT JOIN a ON a.gpu_id = t.gpu_id
LEFT JOIN LATERAL (SELECT * FROM alerts_slice_gpu x WHERE x.shard = 2001 AND x.gpu_id = t.gpu_id ORDER BY x.ts DESC LIMIT 1) l ON true
LEFT JOIN LATERAL (SELECT * FROM alerts_slice_gpu x WHERE x.shard = 2001 AND x.gpu_id = t.gpu_id AND (x.shard, x.gpu_id, x.ts) >= (2001, t.gpu_id, %(start_60s)s) ORDER BY x.ts LIMIT 1) f0 ON true
LEFT JOIN LATERAL (SELECT * FROM alerts_slice_gpu x WHERE x.shard = 2001 AND x.gpu_id = t.gpu_id AND (x.shard, x.gpu_id, x.ts) >= (2001, t.gpu_id, %(start_600s)s) ORDER BY x.ts LIMIT 1) f1 ON true
CROSS JOIN LATERAL (SELECT
    (a.v0)::float8 AS v1,
    (a.v1)::float8 AS v2,
    (a.v2)::float8 AS v3,
    (a.v3)::float8 AS v4,
    (a.v4)::float8 AS v5,
    (a.v5)::float8 AS v6,
    (CASE WHEN l.ts >= %(start_60s)s THEN l.temp_c_last END)::float8 AS v7,
    (((CASE WHEN l.ts >= %(start_600s)s THEN l.ecc_dbe_total_last END) - f1.ecc_dbe_total_first) / NULLIF(extract(epoch FROM l.t1 - f1.t0), 0))::float8 AS v8,
    (a.v6)::float8 AS v9
  OFFSET 0) x
CROSS JOIN LATERAL unnest(array_remove(ARRAY[
    CASE WHEN x.v1 > %(threshold_1)s::float8 THEN 1 END,
    CASE WHEN x.v2 >= %(threshold_2)s::float8 THEN 2 END,
    CASE WHEN x.v3 < %(threshold_3)s::float8 THEN 3 END,
    CASE WHEN x.v4 >= %(threshold_4)s::float8 THEN 4 END,
    CASE WHEN x.v5 >= %(threshold_5)s::float8 THEN 5 END,
    CASE WHEN x.v6 <> %(threshold_6)s::float8 THEN 6 END,
    CASE WHEN x.v7 <= %(threshold_7)s::float8 THEN 7 END,
    CASE WHEN x.v8 > %(threshold_8)s::float8 THEN 8 END,
    CASE WHEN x.v9 = %(threshold_9)s::float8 THEN 9 END], NULL)) AS r(i)
