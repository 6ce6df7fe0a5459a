-- windows.raw.read_sql: the host rows, every column
-- binds: hi, lo (given where it runs)
SELECT string_agg(
  int8send(t.host_id::int8)
  || timestamptz_send(t.ts)
  || float4send(coalesce(t.cpu_pct, 'NaN'))
  || float8send(coalesce(t.load1::float8, 'NaN'))
  || float8send(coalesce(t.mem_used_bytes::float8, 'NaN'))
  || float8send(coalesce(t.mem_total_bytes::float8, 'NaN'))
  || float8send(coalesce(t.swap_used_bytes::float8, 'NaN'))
  || float4send(coalesce(t.cpu_throttled_pct, 'NaN'))
  || float8send(coalesce(t.net_rx_bps::float8, 'NaN'))
  || float8send(coalesce(t.net_tx_bps::float8, 'NaN'))
  || float8send(coalesce(t.disk_read_bps::float8, 'NaN'))
  || float8send(coalesce(t.disk_write_bps::float8, 'NaN')),
  ''::bytea)
FROM telemetry_host_sample t
WHERE t.ts > %(lo)s AND t.ts <= %(hi)s
