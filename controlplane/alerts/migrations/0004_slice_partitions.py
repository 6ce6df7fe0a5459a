"""The slice tables partitioned by evaluation shard (alerts/shards.py): dropped and created
again. They hold derived rows only; the next evaluation cycle rebuilds its windows. (The
evaluator of the time made each shard's UNLOGGED partition; migration 0008 drops the tables.)

The tables are spelled out as the metric catalog made them when this migration was written: a
migration must not change with today's code."""

from django.db import migrations

STATE_TABLE = "alerts_slice_state"
# Per table: its key columns, its scalar metrics (six parts each, a bitmask two more) and its
# histograms (the layout and the counts summed bucket by bucket).
SLICES = {
    "alerts_slice_host": {
        "keys": (("host_id", "int4"),),
        "scalars": ("cpu_pct", "load1", "mem_used_bytes", "mem_total_bytes", "swap_used_bytes",
                    "cpu_throttled_pct", "net_rx_bps", "net_tx_bps", "disk_read_bps",
                    "disk_write_bps"),
        "bitmasks": (),
        "histograms": (),
    },
    "alerts_slice_gpu": {
        "keys": (("gpu_id", "int4"),),
        "scalars": ("mem_used_bytes", "mem_total_bytes", "util_pct", "mem_util_pct", "temp_c",
                    "power_w", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz", "pcie_tx_bps",
                    "pcie_rx_bps", "throttle_reasons", "ecc_dbe_total", "xid_last", "fan_pct"),
        "bitmasks": ("throttle_reasons",),
        "histograms": (),
    },
    "alerts_slice_engine": {
        "keys": (("engine_id", "int4"),),
        "scalars": ("up", "requests_running", "requests_waiting", "kv_cache_usage",
                    "prefix_cache_hit_rate", "preemptions_per_s", "prompt_tokens_per_s",
                    "generation_tokens_per_s", "requests_finished_per_s",
                    "admission_rejections_per_s"),
        "bitmasks": (),
        "histograms": ("ttft_seconds", "itl_seconds", "e2e_seconds", "queue_seconds"),
    },
    "alerts_slice_proc": {
        "keys": (("host_id", "int4"), ("pid", "int4")),
        "scalars": ("cpu_pct", "rss_bytes", "gpu_mem_bytes", "threads"),
        "bitmasks": (),
        "histograms": (),
    },
}
SCALAR_PARTS = (("n", "int4"), ("sum", "float8"), ("min", "float8"), ("max", "float8"),
                ("first", "float8"), ("last", "float8"))
BITMASK_PARTS = (("vals", "int8[]"), ("cnts", "int4[]"))


def columns(name: str, table: dict) -> list[tuple[str, str]]:
    cols = [("shard", "int4"), *table["keys"], ("ts", "timestamptz"), ("n", "int4"), ("t0", "timestamptz"),
            ("t1", "timestamptz")]
    if name == "alerts_slice_proc":
        cols.append(("engine_id", "int4"))  # the engine the process served last
    for metric in table["scalars"]:
        parts = SCALAR_PARTS + (BITMASK_PARTS if metric in table["bitmasks"] else ())
        cols += [(f"{metric}_{part}", typ) for part, typ in parts]
    for key in table["histograms"]:
        cols += [(f"{key}_layout", "int2"), (f"{key}_counts", "int8[]")]
    return cols


def schema_sql() -> list[str]:
    out = [f"CREATE UNLOGGED TABLE IF NOT EXISTS {STATE_TABLE} (entity text PRIMARY KEY, "
           f"lo timestamptz NOT NULL, hi timestamptz NOT NULL)"]
    for name, table in SLICES.items():
        cols = columns(name, table)
        keys = ", ".join(key for key, _ in table["keys"])
        out += [
            f"CREATE TABLE IF NOT EXISTS {name} "
            f"({', '.join(f'{col} {typ}' for col, typ in cols)}, "
            f"PRIMARY KEY (shard, {keys}, ts)) PARTITION BY LIST (shard)",
            f"CREATE INDEX IF NOT EXISTS {name}_ts ON {name} (ts)",
            *(f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {col} {typ}" for col, typ in cols),
        ]
    return out


def recreate_slice_tables(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for name in (STATE_TABLE, *SLICES):
            cursor.execute(f"DROP TABLE IF EXISTS {name}")
        for stmt in schema_sql():
            cursor.execute(stmt)


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0003_slices"),
    ]

    operations = [
        migrations.RunPython(recreate_slice_tables, migrations.RunPython.noop),
    ]
