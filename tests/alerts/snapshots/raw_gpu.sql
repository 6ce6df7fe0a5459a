-- windows.raw.copy_sql: the gpu rows, every column
-- binds: hi, lo (given where it runs)
COPY (SELECT
  t.gpu_id::int8,
  t.ts,
  coalesce(t.mem_used_bytes::float8, 'NaN'),
  coalesce(t.mem_total_bytes::float8, 'NaN'),
  coalesce(t.util_pct, 'NaN'),
  coalesce(t.mem_util_pct, 'NaN'),
  coalesce(t.temp_c, 'NaN'),
  coalesce(t.power_w, 'NaN'),
  coalesce(t.power_limit_w, 'NaN'),
  coalesce(t.sm_clock_mhz, 'NaN'),
  coalesce(t.mem_clock_mhz, 'NaN'),
  coalesce(t.pcie_tx_bps::float8, 'NaN'),
  coalesce(t.pcie_rx_bps::float8, 'NaN'),
  coalesce(t.throttle_reasons::float8, 'NaN'),
  coalesce(t.ecc_dbe_total::float8, 'NaN'),
  coalesce(t.xid_last::float8, 'NaN'),
  coalesce(t.fan_pct, 'NaN')
FROM telemetry_gpu_sample t
WHERE t.ts > %(lo)s AND t.ts <= %(hi)s) TO STDOUT (FORMAT binary)
