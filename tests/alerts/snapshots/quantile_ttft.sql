-- queries.quantile_query: TTFT buckets summed per engine and layout
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(since)s = 2026-05-04T11:55:00+00:00
SELECT t.engine_id, e.host_id, t.ttft_seconds_layout,
  (ARRAY[sum(t.ttft_seconds_counts[1])::int8, sum(t.ttft_seconds_counts[2])::int8, sum(t.ttft_seconds_counts[3])::int8, sum(t.ttft_seconds_counts[4])::int8, sum(t.ttft_seconds_counts[5])::int8, sum(t.ttft_seconds_counts[6])::int8, sum(t.ttft_seconds_counts[7])::int8])[1:max(cardinality(t.ttft_seconds_counts))]
FROM alerts_slice_engine t
JOIN fleet_engine e ON e.id = t.engine_id
WHERE t.ts >= %(since)s AND t.ttft_seconds_counts IS NOT NULL AND t.shard = 2001
GROUP BY 1, 2, 3
