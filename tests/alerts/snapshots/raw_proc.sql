-- windows.raw.read_sql: the proc rows, every column
-- binds: hi, lo (given where it runs)
SELECT
  array_send(array_agg((t.host_id::int8 << 32) | t.pid)),
  array_send(array_agg(t.ts)),
  array_send(array_agg(coalesce(t.engine_id, -1))),
  array_send(array_agg(coalesce(t.cpu_pct, 'NaN'))),
  array_send(array_agg(coalesce(t.cpu_wait_pct, 'NaN'))),
  array_send(array_agg(coalesce(t.rss_bytes::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.gpu_mem_bytes::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.threads::float8, 'NaN')))
FROM telemetry_proc_sample t
WHERE t.ts > %(lo)s AND t.ts <= %(hi)s
