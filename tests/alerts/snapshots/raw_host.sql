-- windows.raw.read_sql: the host rows, every column
-- binds: hi, lo (given where it runs)
SELECT
  array_send(array_agg(t.host_id::int8)),
  array_send(array_agg(t.ts)),
  array_send(array_agg(coalesce(t.cpu_pct, 'NaN'))),
  array_send(array_agg(coalesce(t.load1::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.mem_used_bytes::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.mem_total_bytes::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.swap_used_bytes::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.cpu_throttled_pct, 'NaN'))),
  array_send(array_agg(coalesce(t.net_rx_bps::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.net_tx_bps::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.disk_read_bps::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.disk_write_bps::float8, 'NaN')))
FROM telemetry_host_sample t
WHERE t.ts > %(lo)s AND t.ts <= %(hi)s
