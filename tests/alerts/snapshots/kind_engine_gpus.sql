-- named_kinds.engine_gpus_sql (cpu_bound_engine)
-- now = 2026-05-04T12:00:05+00:00, binding:
SELECT e.id, g.id
FROM fleet_engine e JOIN fleet_gpu g ON g.host_id = e.host_id AND g.present AND e.gpu_uuids ? g.uuid
WHERE e.present
