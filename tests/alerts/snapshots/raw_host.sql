-- windows.raw.copy_sql: the host rows, every column
-- binds: hi, lo (given where it runs)
COPY (SELECT
  t.host_id::int8,
  t.ts,
  coalesce(t.cpu_pct, 'NaN'),
  coalesce(t.load1::float8, 'NaN'),
  coalesce(t.mem_used_bytes::float8, 'NaN'),
  coalesce(t.mem_total_bytes::float8, 'NaN'),
  coalesce(t.swap_used_bytes::float8, 'NaN'),
  coalesce(t.cpu_throttled_pct, 'NaN'),
  coalesce(t.net_rx_bps::float8, 'NaN'),
  coalesce(t.net_tx_bps::float8, 'NaN'),
  coalesce(t.disk_read_bps::float8, 'NaN'),
  coalesce(t.disk_write_bps::float8, 'NaN')
FROM telemetry_host_sample t
WHERE t.ts > %(lo)s AND t.ts <= %(hi)s) TO STDOUT (FORMAT binary)
