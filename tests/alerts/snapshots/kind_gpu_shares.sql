-- named_kinds.gpu_shares_sql (memory_beyond_share)
-- now = 2026-05-04T12:00:05+00:00, binding:
--   %(default_share)s = 0.9
SELECT g.id, g.host_id, g.mem_total_bytes, min(e.id),
  sum(CASE WHEN (e.config->>'gpu_memory_utilization') ~ '^(0?\.[0-9]{1,20}|[01](\.[0-9]{0,20})?)$' THEN CASE WHEN (e.config->>'gpu_memory_utilization')::float8 > 0 AND (e.config->>'gpu_memory_utilization')::float8 <= 1 THEN (e.config->>'gpu_memory_utilization')::float8 ELSE %(default_share)s END ELSE %(default_share)s END)
FROM fleet_engine e JOIN fleet_gpu g ON g.host_id = e.host_id AND g.present AND e.gpu_uuids ? g.uuid
WHERE e.present
GROUP BY g.id
