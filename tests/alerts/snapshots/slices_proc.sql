-- windows.slices.build_sql: the proc slices
-- binds: hi, lo (given where it runs)
INSERT INTO alerts_slice_proc (shard,
  host_id, pid, ts, n, t0, t1, engine_id,
  cpu_pct_n, cpu_pct_sum, cpu_pct_min, cpu_pct_max, cpu_pct_first, cpu_pct_last,
  rss_bytes_n, rss_bytes_sum, rss_bytes_min, rss_bytes_max, rss_bytes_first, rss_bytes_last,
  gpu_mem_bytes_n, gpu_mem_bytes_sum, gpu_mem_bytes_min, gpu_mem_bytes_max, gpu_mem_bytes_first, gpu_mem_bytes_last,
  threads_n, threads_sum, threads_min, threads_max, threads_first, threads_last)
WITH r AS MATERIALIZED (
  SELECT
    t.host_id,
    t.pid,
    t.ts,
    t.engine_id,
    t.cpu_pct,
    t.rss_bytes,
    t.gpu_mem_bytes,
    t.threads
  FROM telemetry_proc_sample t
  WHERE t.ts > %(lo)s AND t.ts <= %(hi)s AND true),
g AS (
  SELECT t.host_id, t.pid, date_bin(interval '10 seconds', t.ts - interval '1 microsecond', TIMESTAMPTZ '2000-01-01 00:00:00+00') AS s,
    count(*)::int4 AS n, min(t.ts) AS t0, max(t.ts) AS t1,
    count(t.cpu_pct)::int4 AS cpu_pct_n, sum(t.cpu_pct)::float8 AS cpu_pct_sum, min(t.cpu_pct)::float8 AS cpu_pct_min, max(t.cpu_pct)::float8 AS cpu_pct_max,
    count(t.rss_bytes)::int4 AS rss_bytes_n, sum(t.rss_bytes)::float8 AS rss_bytes_sum, min(t.rss_bytes)::float8 AS rss_bytes_min, max(t.rss_bytes)::float8 AS rss_bytes_max,
    count(t.gpu_mem_bytes)::int4 AS gpu_mem_bytes_n, sum(t.gpu_mem_bytes)::float8 AS gpu_mem_bytes_sum, min(t.gpu_mem_bytes)::float8 AS gpu_mem_bytes_min, max(t.gpu_mem_bytes)::float8 AS gpu_mem_bytes_max,
    count(t.threads)::int4 AS threads_n, sum(t.threads)::float8 AS threads_sum, min(t.threads)::float8 AS threads_min, max(t.threads)::float8 AS threads_max
  FROM r t
  GROUP BY 1, 2, 3)
SELECT 1000,
  g.host_id, g.pid, g.s, g.n, g.t0, g.t1, l.engine_id,
  g.cpu_pct_n, g.cpu_pct_sum, g.cpu_pct_min, g.cpu_pct_max,
  (CASE WHEN f.cpu_pct IS NOT NULL THEN f.cpu_pct WHEN g.cpu_pct_n > 0 THEN (SELECT p.cpu_pct FROM telemetry_proc_sample p WHERE p.host_id = g.host_id AND p.pid = g.pid AND p.ts > g.s AND p.ts <= g.t1 AND p.cpu_pct IS NOT NULL ORDER BY p.ts ASC LIMIT 1) END)::float8,
  (CASE WHEN l.cpu_pct IS NOT NULL THEN l.cpu_pct WHEN g.cpu_pct_n > 0 THEN (SELECT p.cpu_pct FROM telemetry_proc_sample p WHERE p.host_id = g.host_id AND p.pid = g.pid AND p.ts > g.s AND p.ts <= g.t1 AND p.cpu_pct IS NOT NULL ORDER BY p.ts DESC LIMIT 1) END)::float8,
  g.rss_bytes_n, g.rss_bytes_sum, g.rss_bytes_min, g.rss_bytes_max,
  (CASE WHEN f.rss_bytes IS NOT NULL THEN f.rss_bytes WHEN g.rss_bytes_n > 0 THEN (SELECT p.rss_bytes FROM telemetry_proc_sample p WHERE p.host_id = g.host_id AND p.pid = g.pid AND p.ts > g.s AND p.ts <= g.t1 AND p.rss_bytes IS NOT NULL ORDER BY p.ts ASC LIMIT 1) END)::float8,
  (CASE WHEN l.rss_bytes IS NOT NULL THEN l.rss_bytes WHEN g.rss_bytes_n > 0 THEN (SELECT p.rss_bytes FROM telemetry_proc_sample p WHERE p.host_id = g.host_id AND p.pid = g.pid AND p.ts > g.s AND p.ts <= g.t1 AND p.rss_bytes IS NOT NULL ORDER BY p.ts DESC LIMIT 1) END)::float8,
  g.gpu_mem_bytes_n, g.gpu_mem_bytes_sum, g.gpu_mem_bytes_min, g.gpu_mem_bytes_max,
  (CASE WHEN f.gpu_mem_bytes IS NOT NULL THEN f.gpu_mem_bytes WHEN g.gpu_mem_bytes_n > 0 THEN (SELECT p.gpu_mem_bytes FROM telemetry_proc_sample p WHERE p.host_id = g.host_id AND p.pid = g.pid AND p.ts > g.s AND p.ts <= g.t1 AND p.gpu_mem_bytes IS NOT NULL ORDER BY p.ts ASC LIMIT 1) END)::float8,
  (CASE WHEN l.gpu_mem_bytes IS NOT NULL THEN l.gpu_mem_bytes WHEN g.gpu_mem_bytes_n > 0 THEN (SELECT p.gpu_mem_bytes FROM telemetry_proc_sample p WHERE p.host_id = g.host_id AND p.pid = g.pid AND p.ts > g.s AND p.ts <= g.t1 AND p.gpu_mem_bytes IS NOT NULL ORDER BY p.ts DESC LIMIT 1) END)::float8,
  g.threads_n, g.threads_sum, g.threads_min, g.threads_max,
  (CASE WHEN f.threads IS NOT NULL THEN f.threads WHEN g.threads_n > 0 THEN (SELECT p.threads FROM telemetry_proc_sample p WHERE p.host_id = g.host_id AND p.pid = g.pid AND p.ts > g.s AND p.ts <= g.t1 AND p.threads IS NOT NULL ORDER BY p.ts ASC LIMIT 1) END)::float8,
  (CASE WHEN l.threads IS NOT NULL THEN l.threads WHEN g.threads_n > 0 THEN (SELECT p.threads FROM telemetry_proc_sample p WHERE p.host_id = g.host_id AND p.pid = g.pid AND p.ts > g.s AND p.ts <= g.t1 AND p.threads IS NOT NULL ORDER BY p.ts DESC LIMIT 1) END)::float8
FROM g
JOIN r f ON f.host_id = g.host_id AND f.pid = g.pid AND f.ts = g.t0
JOIN r l ON l.host_id = g.host_id AND l.pid = g.pid AND l.ts = g.t1
