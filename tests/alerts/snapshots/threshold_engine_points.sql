-- queries.entity_query: last and rate only (no band scan)
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(start_30s)s = 2026-05-04T11:59:30+00:00
--   %(start_120s)s = 2026-05-04T11:58:00+00:00
--   %(threshold_1)s = 10
--   %(threshold_2)s = 0.1
SELECT r.i, 'engine:' || t.engine_id, t.host_id, t.engine_id, NULL::int, (ARRAY[x.v1, x.v2])[r.i]
FROM (SELECT * FROM (SELECT id AS engine_id, host_id FROM fleet_engine) r WHERE true) t
LEFT JOIN LATERAL (SELECT * FROM alerts_slice_engine x WHERE x.shard = 1000 AND x.engine_id = t.engine_id ORDER BY x.ts DESC LIMIT 1) l ON true
LEFT JOIN LATERAL (SELECT * FROM alerts_slice_engine x WHERE x.shard = 1000 AND x.engine_id = t.engine_id AND (x.shard, x.engine_id, x.ts) >= (1000, t.engine_id, %(start_30s)s) ORDER BY x.ts LIMIT 1) f0 ON true
LEFT JOIN LATERAL (SELECT * FROM alerts_slice_engine x WHERE x.shard = 1000 AND x.engine_id = t.engine_id AND (x.shard, x.engine_id, x.ts) >= (1000, t.engine_id, %(start_120s)s) ORDER BY x.ts LIMIT 1) f1 ON true
CROSS JOIN LATERAL (SELECT
    (CASE WHEN l.ts >= %(start_30s)s THEN l.requests_waiting_last END)::float8 AS v1,
    (((CASE WHEN l.ts >= %(start_120s)s THEN l.preemptions_per_s_last END) - f1.preemptions_per_s_first) / NULLIF(extract(epoch FROM l.t1 - f1.t0), 0))::float8 AS v2
  OFFSET 0) x
CROSS JOIN LATERAL unnest(array_remove(ARRAY[
    CASE WHEN x.v1 > %(threshold_1)s::float8 THEN 1 END,
    CASE WHEN x.v2 > %(threshold_2)s::float8 THEN 2 END], NULL)) AS r(i)
