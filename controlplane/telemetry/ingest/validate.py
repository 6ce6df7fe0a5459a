"""Validation of protocol-v1 request bodies (v2: columns.py), driven by the metric catalog.

Pure Python and fast: it runs once per value on the ingest hot path. Every refusal names the
field (``samples[3].gpus[1].util_pct``) and refuses the whole request; nothing is stored.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field

from agents.protocol import (
    COLUMNS_VERSION,
    PROCESS_ATTRIBUTES,
    PROTOCOL_VERSION,
    Metric,
    wire_keys,
)
from controlplane.telemetry.ingest.errors import BadRequest, join
from controlplane.telemetry.ingest.inventory_schema import MAX_CPUS, check_inventory

NUMBER = (int, float)
HOST_KEYS = wire_keys("host")
GPU_KEYS = wire_keys("gpu")
ENGINE_KEYS = wire_keys("engine")
PROC_KEYS = wire_keys("proc")
MAX_BATCHES = 2000
MAX_SAMPLES = 10000
MAX_ENTITIES = 4096  # per kind per sample
MAX_BUCKETS = 256
# Unknown metric names a request may carry (a newer agent's few new metrics, listed in the
# reply's "ignored"): hundreds of thousands would cost the server seconds and echo megabytes.
MAX_UNKNOWN_NAMES = 256
MAX_NAME_LENGTH = 100
# A metric without a bound of its own in the catalog still gets one: a value past it (a float
# of 1e300) would overflow float8 arithmetic in the alert rules and fail them for every host.
VALUE_LIMIT = 2.0**63
# Spool evictions one batch may report: the host's counters add them up in bigint columns.
MAX_EVICTED = 2**31


@dataclass
class Batch:
    boot_id: uuid.UUID
    seq: int
    agent_version: str
    inventory: dict | None
    samples: list[dict]
    evicted_batches: int = 0
    evicted_samples: int = 0
    path: str = ""  # "" or "batches[i]": where this batch sits in the request, for messages

    # What the ingest path asks of a batch of either protocol (v2: columns.Columns).
    @property
    def sample_count(self) -> int:
        return len(self.samples)

    def timestamps(self) -> list[float]:
        return [sample["ts"] for sample in self.samples]

    def ts_field(self, i: int) -> str:
        return join(self.path, f"samples[{i}].ts")


@dataclass
class Parsed:
    batches: list[Batch]
    ignored: set[str] = field(default_factory=set)  # unknown metric names, "gpu.foo"


def _require(obj: dict, key: str, kind: type | tuple, path: str, what: str):
    value = obj.get(key)
    if value is None:
        raise BadRequest(f"{what} is required", join(path, key))
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadRequest(f"{what} must be {_kind_name(kind)}", join(path, key))
    return value


def _kind_name(kind: type | tuple) -> str:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer",
             NUMBER: "a number", bool: "true or false"}
    return names.get(kind, str(kind))


def parse_request(body: object) -> Parsed:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    parsed = Parsed([])
    if "batches" in body:
        _check_protocol(body, "")
        batches = _require(body, "batches", list, "", "batches")
        if not batches or len(batches) > MAX_BATCHES:
            raise BadRequest(f"batches must hold 1 to {MAX_BATCHES} batches", "batches")
        for i, item in enumerate(batches):
            parsed.batches.append(_batch(item, f"batches[{i}]", parsed.ignored))
    else:
        parsed.batches.append(_batch(body, "", parsed.ignored))
    return parsed


def _check_protocol(obj: dict, path: str) -> None:
    version = obj.get("protocol")
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise BadRequest(
            f"unsupported protocol version {version!r}; this server speaks {PROTOCOL_VERSION}"
            f" and {COLUMNS_VERSION} (the batches of a request share its version)",
            join(path, "protocol"),
        )


def _batch(obj: object, path: str, ignored: set[str]) -> Batch:
    if not isinstance(obj, dict):
        raise BadRequest("a batch must be an object", path)
    _check_protocol(obj, path)
    agent = _require(obj, "agent", dict, path, "agent")
    apath = join(path, "agent")
    boot_text = _require(agent, "boot_id", str, apath, "boot_id")
    boot_id = _boot_id(boot_text, join(apath, "boot_id"))
    seq = _require(agent, "seq", int, apath, "seq")
    if not 1 <= seq < 2**62:
        raise BadRequest("seq must be a positive integer", join(apath, "seq"))
    version = agent.get("version", "")
    if not isinstance(version, str) or len(version) > 50:
        raise BadRequest("version must be a string of at most 50 characters",
                         join(apath, "version"))
    evicted = _spool(agent.get("spool"), join(apath, "spool"))
    inventory = obj.get("host")
    if inventory is not None:
        check_inventory(inventory, join(path, "host"))
    samples = _require(obj, "samples", list, path, "samples")
    if len(samples) > MAX_SAMPLES:
        raise BadRequest(f"at most {MAX_SAMPLES} samples per batch", join(path, "samples"))
    seen_ts: set[float] = set()
    for i, sample in enumerate(samples):
        spath = f"{join(path, 'samples')}[{i}]"
        _sample(sample, spath, ignored)
        if sample["ts"] in seen_ts:
            raise BadRequest("two samples of one batch share this ts", f"{spath}.ts")
        seen_ts.add(sample["ts"])
    return Batch(boot_id, seq, version, inventory, samples, *evicted, path=path)


@functools.lru_cache(maxsize=8192)
def _parse_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(text)  # one agent boot sends the same text every second: parse it once


def _boot_id(text: str, path: str) -> uuid.UUID:
    try:
        return _parse_uuid(text)
    except ValueError:
        raise BadRequest("boot_id must be a UUID", path) from None


def _spool(spool: object, path: str) -> tuple[int, int]:
    if spool is None:
        return 0, 0
    if not isinstance(spool, dict):
        raise BadRequest("spool must be an object", path)
    counts = []
    for key in ("evicted_batches", "evicted_samples"):
        value = spool.get(key, 0)
        if type(value) is not int or not 0 <= value < MAX_EVICTED:
            raise BadRequest(f"{key} must be an integer from 0 to {MAX_EVICTED - 1}",
                             join(path, key))
        counts.append(value)
    return counts[0], counts[1]


def _sample(sample: object, path: str, ignored: set[str]) -> None:
    if not isinstance(sample, dict):
        raise BadRequest("a sample must be an object", path)
    ts = _require(sample, "ts", NUMBER, path, "ts")
    if ts <= 0:
        raise BadRequest("ts must be unix seconds", join(path, "ts"))
    host = sample.get("host")
    if host is not None:
        if not isinstance(host, dict):
            raise BadRequest("host must be an object", join(path, "host"))
        _metrics(host, HOST_KEYS, join(path, "host"), ignored, "host", ())
    _entities(sample, "gpus", "uuid", str, GPU_KEYS, path, ignored, "gpu", ())
    _entities(sample, "engines", "name", str, ENGINE_KEYS, path, ignored, "engine", ())
    _entities(sample, "processes", "pid", int, PROC_KEYS, path, ignored, "proc",
              ("engine", *PROCESS_ATTRIBUTES))


def _entities(sample: dict, section: str, id_key: str, id_type: type, keys: dict[str, Metric],
              path: str, ignored: set[str], entity: str, extra: tuple[str, ...]) -> None:
    items = sample.get(section)
    if items is None:
        return
    spath = join(path, section)
    if not isinstance(items, list):
        raise BadRequest(f"{section} must be a list", spath)
    if len(items) > MAX_ENTITIES:
        raise BadRequest(f"at most {MAX_ENTITIES} {section} per sample", spath)
    seen = set()
    for i, item in enumerate(items):
        ident = item.get(id_key) if type(item) is dict else None
        if type(ident) is not id_type or ident in seen or not (
            0 < ident < 2**31 if id_type is int else 0 < len(ident) <= 200  # type: ignore[operator,arg-type]
        ):
            _refuse_entity(item, id_key, id_type, f"{spath}[{i}]", seen)
        seen.add(ident)
        _metrics(item, keys, f"{spath}[{i}]", ignored, entity, extra, id_key)


def _refuse_entity(item: object, id_key: str, id_type: type, path: str, seen: set) -> None:
    if not isinstance(item, dict):
        raise BadRequest("must be an object", path)
    ident = _require(item, id_key, id_type, path, id_key)
    if ident in seen:
        raise BadRequest(f"{id_key} {ident!r} appears twice in this sample", join(path, id_key))
    raise BadRequest(f"{id_key} {ident!r:.60} is out of range", join(path, id_key))


@dataclass(frozen=True)
class _Rule:
    """A metric's checks in the shape the hot loop wants: plain floats, no None."""

    metric: Metric
    shape: int  # SCALAR, ARRAY or HISTOGRAM
    low: float
    high: float
    integer: bool


SCALAR, ARRAY, HISTOGRAM = 0, 1, 2
INT_LIMIT = 2**63


def _rules(keys: dict[str, Metric]) -> dict[str, _Rule]:
    return {
        key: _Rule(m, HISTOGRAM if m.kind == "histogram" else ARRAY if m.array else SCALAR,
                   -VALUE_LIMIT if m.low is None else m.low,
                   VALUE_LIMIT if m.high is None else m.high, m.integer)
        for key, m in keys.items()
    }


RULES = {id(keys): _rules(keys) for keys in (HOST_KEYS, GPU_KEYS, ENGINE_KEYS, PROC_KEYS)}


def _metrics(item: dict, keys: dict[str, Metric], path: str, ignored: set[str], entity: str,
             extra: tuple[str, ...], id_key: str = "") -> None:
    # The hot path: one pass per value. Paths and messages are only built on a refusal.
    rules = RULES[id(keys)]
    for key, value in item.items():
        rule = rules.get(key)
        if rule is None:
            if key == id_key:
                continue
            if key in extra:
                _extra(key, value, join(path, key))
            else:
                note_unknown(ignored, entity, key, path)
            continue
        if rule.shape == SCALAR:
            kind = type(value)
            if not ((kind is float and not rule.integer or kind is int and -INT_LIMIT <= value
                     < INT_LIMIT) and rule.low <= value <= rule.high):  # type: ignore[operator]
                _refuse_number(value, rule.metric, join(path, key))
        elif rule.shape == ARRAY:
            _array(value, rule, join(path, key))
        else:
            _histogram(value, rule.metric, join(path, key))


def note_unknown(ignored: set[str], entity: str, key: str, path: str) -> None:
    """Adds ``entity.key`` to the names a reply lists as ignored, within bounds."""
    if len(key) > MAX_NAME_LENGTH:
        raise BadRequest(f"{key[:40]!r}... is not a metric name (over {MAX_NAME_LENGTH} "
                         "characters)", join(path, key[:40]))
    ignored.add(f"{entity}.{key}")
    if len(ignored) > MAX_UNKNOWN_NAMES:
        raise BadRequest(f"more than {MAX_UNKNOWN_NAMES} unknown metric names in one request "
                         "(an agent sends the catalog's names)", path)


def _array(value: object, rule: _Rule, path: str) -> None:
    if not isinstance(value, list) or len(value) > MAX_ENTITIES:
        raise BadRequest(f"must be a list of numbers ({rule.metric.name})", path)
    if not value or (all(type(v) is float or type(v) is int for v in value)
                     and rule.low <= min(value) and max(value) <= rule.high):
        return
    for i, element in enumerate(value):
        kind = type(element)
        if not ((kind is float or kind is int) and rule.low <= element <= rule.high):  # type: ignore[operator]
            _refuse_number(element, rule.metric, f"{path}[{i}]")


def _refuse_number(value: object, metric: Metric, path: str) -> None:
    kind = type(value)
    if kind is not float and kind is not int:
        raise BadRequest(f"must be a number ({metric.name}), got {value!r:.40}", path)
    if metric.integer and kind is not int:
        raise BadRequest(f"must be an integer ({metric.name}), got {value!r}", path)
    if metric.low is not None and value < metric.low:  # type: ignore[operator]
        raise BadRequest(f"{value} is below the minimum {metric.low} of {metric.name}", path)
    if metric.high is not None and value > metric.high:  # type: ignore[operator]
        raise BadRequest(f"{value} is above the maximum {metric.high} of {metric.name}", path)
    if not -VALUE_LIMIT <= value <= VALUE_LIMIT:  # type: ignore[operator]
        raise BadRequest(f"{value:.6g} is out of range for {metric.name} (at most 2**63 in "
                         "magnitude)", path)
    raise BadRequest(f"{value} is out of range for {metric.name}", path)



# Bucket bounds already found valid: agents send the same few layouts every second, so a
# known one costs a tuple and a set lookup instead of a Python loop over every bound.
_VALID_BOUNDS: set[tuple] = set()
_MAX_KNOWN_BOUNDS = 1024


def _histogram(value: object, metric: Metric, path: str) -> None:
    if type(value) is not dict:
        raise BadRequest(f"a histogram ({metric.name}) must be an object with le and counts",
                         path)
    le, counts = value.get("le"), value.get("counts")
    if type(le) is not list or type(counts) is not list:
        _require(value, "le", list, path, "le")
        _require(value, "counts", list, path, "counts")
    bounds = tuple(le)  # type: ignore[arg-type]
    if bounds not in _VALID_BOUNDS:
        _check_bounds(bounds, path)
    if len(counts) != len(bounds) + 1:  # type: ignore[arg-type]
        raise BadRequest(f"counts must hold len(le) + 1 = {len(bounds) + 1} values (the last "
                         f"for +Inf), got {len(counts)}", join(path, "counts"))  # type: ignore[arg-type]
    # all/min/max loop in C; the slow loop below only runs to name the bad element.
    if not (all(type(c) is int for c in counts) and min(counts) >= 0  # type: ignore[union-attr]
            and max(counts) < 2**31):  # type: ignore[type-var]
        for i, count in enumerate(counts):  # type: ignore[arg-type]
            if type(count) is not int or not 0 <= count < 2**31:
                raise BadRequest("counts must be non-negative integers (per-interval deltas)",
                                 f"{path}.counts[{i}]")
    total = value.get("sum")
    if total is not None and (type(total) not in NUMBER
                              or not -VALUE_LIMIT <= total <= VALUE_LIMIT):  # type: ignore[operator]
        raise BadRequest("sum must be a number of at most 2**63 in magnitude", join(path, "sum"))


def _check_bounds(bounds: tuple, path: str) -> None:
    if not 0 < len(bounds) <= MAX_BUCKETS:
        raise BadRequest(f"le must hold 1 to {MAX_BUCKETS} bounds", join(path, "le"))
    previous = None
    for i, bound in enumerate(bounds):
        if (type(bound) not in NUMBER or not -VALUE_LIMIT <= bound <= VALUE_LIMIT
                or previous is not None and bound <= previous):
            raise BadRequest("le must be finite numbers in ascending order (at most 2**63 in "
                             "magnitude)", f"{path}.le[{i}]")
        previous = bound
    if len(_VALID_BOUNDS) < _MAX_KNOWN_BOUNDS:
        _VALID_BOUNDS.add(bounds)


def _extra(key: str, value: object, path: str) -> None:
    if key == "engine":
        if not isinstance(value, str) or len(value) > 200:
            raise BadRequest("engine must be an engine name", path)
        return
    if not isinstance(value, list) or len(value) > MAX_ENTITIES:
        raise BadRequest(f"{key} must be a list of integers", path)
    for i, element in enumerate(value):
        if type(element) is not int or not 0 <= element < MAX_CPUS:
            raise BadRequest(f"{key} must be a list of integers 0-{MAX_CPUS - 1}",
                             f"{path}[{i}]")
