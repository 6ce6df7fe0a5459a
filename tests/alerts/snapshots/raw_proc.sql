-- windows.raw.copy_sql: the proc rows, every column
-- binds: hi, lo (given where it runs)
COPY (SELECT
  (t.host_id::int8 << 32) | t.pid,
  t.ts,
  coalesce(t.engine_id, -1),
  coalesce(t.cpu_pct, 'NaN'),
  coalesce(t.rss_bytes::float8, 'NaN'),
  coalesce(t.gpu_mem_bytes::float8, 'NaN'),
  coalesce(t.threads::float8, 'NaN')
FROM telemetry_proc_sample t
WHERE t.ts > %(lo)s AND t.ts <= %(hi)s) TO STDOUT (FORMAT binary)
