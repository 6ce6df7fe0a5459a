-- windows.raw.read_sql: the proc rows, every column
-- binds: hi, lo (given where it runs)
SELECT string_agg(
  int8send((t.host_id::int8 << 32) | t.pid)
  || timestamptz_send(t.ts)
  || int4send(coalesce(t.engine_id, -1))
  || float4send(coalesce(t.cpu_pct, 'NaN'))
  || float4send(coalesce(t.cpu_wait_pct, 'NaN'))
  || float8send(coalesce(t.rss_bytes::float8, 'NaN'))
  || float8send(coalesce(t.gpu_mem_bytes::float8, 'NaN'))
  || float8send(coalesce(t.threads::float8, 'NaN')),
  ''::bytea)
FROM telemetry_proc_sample t
WHERE t.ts > %(lo)s AND t.ts <= %(hi)s
