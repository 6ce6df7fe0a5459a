"""Keep the slice tables current: each cycle folds the newest raw rows into slices.

``refresh(now, needs)`` makes the slices of each entity cover ``(floor(now - longest), now]``,
``longest`` being the longest window among the rules that read that entity. The watermark
(``alerts_slice_state``: the slices cover ``(lo, hi]``) says what is there already: a cycle
rebuilds only the slices from ``hi - LATE_S`` on, so rows that reached PostgreSQL a few
seconds after their timestamp (the agent's send, the ingest writer's flush) are counted. Rows
later than that (a spool replayed after an outage) are not: alerting on minutes-old data helps
nobody, and the agent-offline rule has already spoken. Whenever the watermark does not fit
(first cycle, time went backwards) the whole span is rebuilt; a rule with a longer window adds
only the span before the slices there (at fleet scale a rebuild of a 10-minute window is half a
minute without evaluation).

``isolated()`` shadows the tables with temporary copies for one transaction, so a preview can
build whatever windows it wants without touching the evaluator's.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction

from agents.protocol import Entity, Metric
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.alerts.windows.schema import (
    SCALAR_PARTS,
    SLICE_S,
    SLICES,
    STATE_TABLE,
    SliceTable,
    partition_name,
    partition_sql,
)
from controlplane.alerts.windows.sql import bucket_sums, max_buckets

# Rows that arrive up to this long after their timestamp still count (see the module doc).
LATE_S = 5
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_EPOCH_SQL = "TIMESTAMPTZ '2000-01-01 00:00:00+00'"


def floor_slice(at: datetime) -> datetime:
    """The start of the 10-s boundary at or before ``at``."""
    seconds = (at - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=seconds // SLICE_S * SLICE_S)


def window_start(now: datetime, window_s: int) -> datetime:
    """The first slice a window ``(now - window_s, now]`` reads: windows are rounded out to
    whole slices, so a 60-s window reads 60 to 70 s of samples."""
    return floor_slice(now - timedelta(seconds=window_s))


def refresh(now: datetime, needs: dict[Entity, int], shard: Shard = WHOLE,
            metrics: dict[Entity, frozenset[Metric]] | None = None) -> None:
    """Bring each entity's slices up to ``now`` for windows up to ``needs[entity]`` seconds,
    for the targets of ``shard`` (each shard keeps a watermark of its own). ``metrics``: fold
    only these of an entity (a preview's own slices; the evaluator folds them all)."""
    with connection.cursor() as cursor:
        # the grouping sorts ~100 MB at fleet scale: in memory, not in temp files
        cursor.execute("SET LOCAL work_mem = '64MB'")
        cursor.execute(f"SELECT entity, lo, hi FROM {STATE_TABLE}")
        marks = {entity: (lo, hi) for entity, lo, hi in cursor.fetchall()}
        buckets = max_buckets(cursor)
        for entity, longest in needs.items():
            table, key = SLICES[entity], shard.mark(entity)
            if metrics and entity in metrics:
                table = narrowed(table, metrics[entity])
            lo = window_start(now, longest)
            mark = marks.get(key)
            if mark is None or mark[1] > now:
                start = back = lo  # nothing usable: rebuild the whole span
            else:
                start = max(floor_slice(mark[1] - timedelta(seconds=LATE_S)), lo)
                # A longer window appeared: only the span before the slices there is added.
                back = min(mark[0], start) if mark[0] > lo else lo
            cursor.execute(f"DELETE FROM {table.name} WHERE shard = {shard.code} "
                           f"AND (ts >= %(start)s OR ts < %(lo)s)", {"start": start, "lo": lo})
            with _robust_plan(cursor):
                if back > lo:
                    cursor.execute(build_sql(table, shard, buckets), {"lo": lo, "hi": back})
                cursor.execute(build_sql(table, shard, buckets), {"lo": start, "hi": now})
            if start == lo or back > lo:  # the planner needs to know the table's new size
                cursor.execute(f"ANALYZE {table.name}")
            cursor.execute(
                f"INSERT INTO {STATE_TABLE} (entity, lo, hi) VALUES (%(key)s, %(lo)s, %(hi)s) "
                f"ON CONFLICT (entity) DO UPDATE SET lo = EXCLUDED.lo, hi = EXCLUDED.hi",
                {"key": key, "lo": lo, "hi": now})


@contextmanager
def _robust_plan(cursor):
    """The newest seconds always lie past the table's statistics, so the planner expects one
    row where there are tens of thousands, and joins the per-slice sub-selects by nested loop,
    running them once per slice (minutes). A full rebuild, the other way round, would walk the
    (entity, ts) primary key in entity order: a random read of every row. Neither is what
    these statements need: hash joins and a scan by time; the first/last row lookups stay
    primary-key lookups (LATERAL), as bitmap scans."""
    cursor.execute("SET LOCAL enable_nestloop = off")
    cursor.execute("SET LOCAL enable_indexscan = off")
    try:
        yield
    finally:
        cursor.execute("SET LOCAL enable_nestloop = on")
        cursor.execute("SET LOCAL enable_indexscan = on")


def ensure_partitions(shards: list[Shard]) -> None:
    """The slice tables' partitions for these shards, created when missing. Outside the
    cycle's transaction: creating a partition locks its parent, which the lanes read. Two
    workers creating the same partition at once would collide in the catalog: the creation
    holds a lock of its own. A new lane count drops the other counts' partitions and their
    watermarks (a fleet's worth of stale slices otherwise; coming back to a count rebuilds its
    windows)."""
    wanted = {partition_name(table, shard.code): (table, shard)
              for table in SLICES.values() for shard in shards}
    with connection.cursor() as cursor:
        cursor.execute("SELECT n FROM unnest(%(names)s::text[]) n WHERE to_regclass(n) IS NULL",
                       {"names": list(wanted)})
        missing = [wanted[name] for (name,) in cursor.fetchall()]
    if not missing:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('pitwall.alert_slice_partitions'))")
        for table, shard in missing:
            cursor.execute(partition_sql(table, shard.code))
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = ANY(%(tables)s::regclass[])",
            {"tables": [t.name for t in SLICES.values()]})
        for (name,) in cursor.fetchall():
            if name not in wanted:
                cursor.execute(f"DROP TABLE {name}")
        marks = [shard.mark(entity) for entity in SLICES for shard in shards]
        cursor.execute(f"DELETE FROM {STATE_TABLE} WHERE entity <> ALL(%(marks)s::text[])",
                       {"marks": marks})


def isolated() -> None:
    """Inside a transaction: temporary slice tables that shadow the real ones until it ends
    (temporary tables come first on the search path)."""
    with connection.cursor() as cursor:
        for name in (STATE_TABLE, *(t.name for t in SLICES.values())):
            cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} "
                           f"(LIKE public.{name} INCLUDING ALL) ON COMMIT DROP")


def _bin(alias: str = "t") -> str:
    # right-closed slices: a row at exactly s + 10 s belongs to slice s
    return f"date_bin(interval '{SLICE_S} seconds', {alias}.ts - interval '1 microsecond', " \
           f"{_EPOCH_SQL})"


def narrowed(table: SliceTable, metrics: frozenset[Metric]) -> SliceTable:
    """The slice table with only these metrics folded: the others stay NULL. A preview of one
    rule needs one."""
    return replace(table, scalars=tuple(c for c in table.scalars if c.metric in metrics),
                   bitmasks=tuple(c for c in table.bitmasks if c.metric in metrics),
                   histograms=tuple(m for m in table.histograms if m in metrics))


def _read(table: SliceTable) -> str:
    """The raw columns a fold reads (alias t)."""
    names = [*table.keys, "ts", *(("engine_id",) if table.entity == "proc" else ()),
             *(c.name for c in table.scalars),
             *(c.name for c in table.raw.columns if c.part and c.metric in table.histograms)]
    return _lines([f"t.{n}" for n in dict.fromkeys(names)], 4)


def build_sql(table: SliceTable, shard: Shard = WHOLE, buckets: int = 1) -> str:
    """INSERT the slices of the raw rows in (%(lo)s, %(hi)s] of the shard's targets; one
    statement per entity. ``buckets``: the most buckets a histogram layout has."""
    raw, keys = table.raw.name, table.keys
    key_list = ", ".join(f"t.{k}" for k in keys)
    where = f"WHERE t.ts > %(lo)s AND t.ts <= %(hi)s AND {shard.rows(table.entity, 't')}"
    group = ", ".join(str(i) for i in range(1, len(keys) + 2))
    # one line per metric in the column lists (the statement's layout: tests/alerts/snapshots/)
    aggs = ["count(*)::int4 AS n, min(t.ts) AS t0, max(t.ts) AS t1"]
    for c in table.scalars:
        aggs.append(f"count(t.{c.name})::int4 AS {c.name}_n, "
                    f"sum(t.{c.name})::float8 AS {c.name}_sum, "
                    f"min(t.{c.name})::float8 AS {c.name}_min, "
                    f"max(t.{c.name})::float8 AS {c.name}_max")
    head = f"{key_list}, {_bin()} AS s"
    on = lambda a: " AND ".join(f"{a}.{k} = g.{k}" for k in keys)  # noqa: E731
    cols = [", ".join([*(f"g.{k}" for k in keys), "g.s", "g.n", "g.t0", "g.t1",
                       *(("l.engine_id",) if table.entity == "proc" else ())])]
    names = [", ".join([*keys, "ts", "n", "t0", "t1",
                        *(("engine_id",) if table.entity == "proc" else ())])]
    for c in table.scalars:
        cols += [", ".join(f"g.{c.name}_{p}" for p in ("n", "sum", "min", "max")),
                 _present(table, c.name, "f", "ASC"), _present(table, c.name, "l", "DESC")]
        names.append(", ".join(f"{c.name}_{p}" for p in SCALAR_PARTS))
    joins = []
    for i, c in enumerate(table.bitmasks):
        joins.append(f"LEFT JOIN LATERAL ({_distinct_values(table, c.name)}) b{i} ON true")
        one = f"g.{c.name}_min = g.{c.name}_max"
        cols += [f"CASE WHEN {one} THEN ARRAY[g.{c.name}_min::int8] ELSE b{i}.vals END",
                 f"CASE WHEN {one} THEN ARRAY[g.{c.name}_n] ELSE b{i}.cnts END"]
        names.append(f"{c.name}_vals, {c.name}_cnts")
    for i, m in enumerate(table.histograms):
        joins.append(f"LEFT JOIN ({_histogram(table, m.key, head, group, buckets)}) h{i} "
                     f"ON {_same(keys, f'h{i}')}")
        cols += [f"h{i}.lay", f"h{i}.counts"]
        names.append(f"{m.key}_layout, {m.key}_counts")
    # The rows read once (r); the slices grouped from them (g); the slice's first and last rows
    # joined back from r (a hash join, not a primary-key lookup per slice: those were a quarter
    # of the fold).
    return "\n".join([
        f"INSERT INTO {table.name} (shard,\n  {_lines(names)})",
        "WITH r AS MATERIALIZED (",
        f"  SELECT\n    {_read(table)}",
        f"  FROM {raw} t",
        f"  {where}),",
        "g AS (",
        f"  SELECT {head},\n    {_lines(aggs, 4)}",
        "  FROM r t",
        f"  GROUP BY {group})",
        f"SELECT {shard.code},\n  {_lines(cols)}",
        "FROM g",
        f"JOIN r f ON {on('f')} AND f.ts = g.t0",
        f"JOIN r l ON {on('l')} AND l.ts = g.t1",
        *joins])


def _lines(items: list[str], indent: int = 2) -> str:
    """A list, one item a line."""
    return f",\n{' ' * indent}".join(items)


def _present(table: SliceTable, col: str, row: str, order: str) -> str:
    """The first (last) row's value; when that row lacks the metric but others in the slice
    have it (rare: a collector that failed once), the first (last) row that has it."""
    match = " AND ".join(f"p.{k} = g.{k}" for k in table.keys)
    search = (f"(SELECT p.{col} FROM {table.raw.name} p WHERE {match} AND p.ts > g.s "
              f"AND p.ts <= g.t1 AND p.{col} IS NOT NULL ORDER BY p.ts {order} LIMIT 1)")
    return (f"(CASE WHEN {row}.{col} IS NOT NULL THEN {row}.{col} "
            f"WHEN g.{col}_n > 0 THEN {search} END)::float8")


def _same(keys: tuple[str, ...], alias: str) -> str:
    return " AND ".join([*(f"{alias}.{k} = g.{k}" for k in keys), f"{alias}.s = g.s"])


def _distinct_values(table: SliceTable, col: str) -> str:
    """A bitmask's distinct values in the slice and how many rows had each. Most slices hold
    one value (min = max: no lookup); the others read their raw rows again."""
    match = " AND ".join(f"p.{k} = g.{k}" for k in table.keys)
    per_value = (f"SELECT p.{col} AS v, count(*)::int4 AS c FROM {table.raw.name} p "
                 f"WHERE {match} AND p.ts > g.s AND p.ts <= g.t1 AND p.{col} IS NOT NULL "
                 f"GROUP BY 1")
    return (f"SELECT array_agg(x.v ORDER BY x.v) AS vals, array_agg(x.c ORDER BY x.v) AS cnts "
            f"FROM ({per_value}) x WHERE g.{col}_min <> g.{col}_max")


def _histogram(table: SliceTable, key: str, head: str, group: str, buckets: int) -> str:
    """Counts summed bucket by bucket (``bucket_sums``) within the layout holding most
    observations."""
    width = len(table.keys)
    per_layout = (
        f"SELECT {head}, t.{key}_layout AS lay, {bucket_sums(f't.{key}_counts', buckets)} "
        f"AS counts FROM r t WHERE t.{key}_layout IS NOT NULL GROUP BY {group}, {width + 2}")
    lkeys = ", ".join(f"l.{k}" for k in table.keys)
    return (f"SELECT DISTINCT ON ({lkeys}, l.s) {lkeys}, l.s, l.lay, l.counts "
            f"FROM ({per_layout}) l ORDER BY {lkeys}, l.s, "
            f"(SELECT sum(c) FROM unnest(l.counts) c) DESC, l.lay DESC")
