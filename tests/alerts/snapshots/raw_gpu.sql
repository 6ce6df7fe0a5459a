-- windows.raw.read_sql: the gpu rows, every column
-- binds: hi, lo (given where it runs)
SELECT
  array_send(array_agg(t.gpu_id::int8)),
  array_send(array_agg(t.ts)),
  array_send(array_agg(coalesce(t.mem_used_bytes::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.mem_total_bytes::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.util_pct, 'NaN'))),
  array_send(array_agg(coalesce(t.mem_util_pct, 'NaN'))),
  array_send(array_agg(coalesce(t.temp_c, 'NaN'))),
  array_send(array_agg(coalesce(t.power_w, 'NaN'))),
  array_send(array_agg(coalesce(t.power_limit_w, 'NaN'))),
  array_send(array_agg(coalesce(t.sm_clock_mhz, 'NaN'))),
  array_send(array_agg(coalesce(t.mem_clock_mhz, 'NaN'))),
  array_send(array_agg(coalesce(t.pcie_tx_bps::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.pcie_rx_bps::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.throttle_reasons::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.ecc_dbe_total::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.xid_last::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.fan_pct, 'NaN'))),
  array_send(array_agg(coalesce(t.energy_j::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.nvlink_tx_bps::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.nvlink_rx_bps::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.nvlink_errors_total::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.ecc_sbe_total::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.remapped_rows_correctable::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.remapped_rows_uncorrectable::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.remapped_rows_pending::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.remapped_rows_failed::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.pcie_replays_total::float8, 'NaN'))),
  array_send(array_agg(coalesce(t.lost::float8, 'NaN')))
FROM telemetry_gpu_sample t
WHERE t.ts > %(lo)s AND t.ts <= %(hi)s
