"""Coasting: many decode-only engine steps at once, with the same result as one by one.

Between arrivals, finishes and prefills a busy engine runs long stretches of steps in which
every running request decodes one token and nothing else happens. Stepping those one by one
costs a Python loop over the batch per step, which made simulating hours of traffic slow.
``coast`` runs such a stretch in O(steps + batch): the step times come from the roofline (the
batch's KV grows by one token per request per step), the requests' counters move by the number
of steps at the end, and the metrics get one record holding every step's inter-token
latencies. It only coasts while nothing could change the schedule: no waiting request that
could be admitted, no arrival, no finish, no block shortage (so no preemption) and no more
decodes than the token budget.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.sim.engine_model import EngineModel

MIN_STEPS = 3  # below this a stretch is not worth the bookkeeping


def coast(engine: EngineModel, until: float) -> bool:
    """Run a stretch of decode-only steps; False (nothing done) when none is safe."""
    steps = _coastable_steps(engine)
    if steps < MIN_STEPS:
        return False
    steps = _steps_that_fit(engine, steps)
    if steps < MIN_STEPS:
        return False
    horizon = min(until, engine._arrivals[0][0] if engine._arrivals else math.inf)
    start = engine.now
    walls = _run(engine, steps, horizon)
    _finish(engine, start, walls)
    return True


def _coastable_steps(engine: EngineModel) -> int:
    running, config = engine.running, engine.config
    if not running or len(running) > config.max_num_batched_tokens:
        return 0
    if engine.waiting and len(running) < config.max_num_seqs:
        return 0  # an admission may happen in the next step
    left = math.inf
    for request in running:
        # Still prefilling; or one prompt token left (a chunk boundary), whose step gives the
        # first token, not a decode.
        if request.num_tokens - request.computed != 1 or request.generated == 0:
            return 0
        left = min(left, request.output_tokens - request.generated)
    return int(left) - 1  # the step that finishes a request runs the ordinary way


def _steps_that_fit(engine: EngineModel, steps: int) -> int:
    """The most steps (<= steps) whose new KV blocks fit in the free blocks: no preemption."""
    free = engine.num_gpu_blocks - engine.used_blocks
    blocks_for = engine._blocks_for
    need = lambda k: sum(blocks_for(r.computed + k) - r.blocks for r in engine.running)  # noqa: E731
    if need(steps) <= free:
        return steps
    lo, hi = 0, steps  # need(lo) fits, need(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= free else (lo, mid)
    return lo


def _run(engine: EngineModel, steps: int, horizon: float) -> list[float]:
    """Step times: a step starts only before the horizon, as in EngineModel.advance."""
    n, t = len(engine.running), engine.now
    kv = sum(r.computed for r in engine.running)
    walls: list[float] = []
    while len(walls) < steps and t < horizon:
        kv += n
        gpu_s = engine.config.step_seconds(n, kv)
        engine.now = t
        wall = engine._wall(gpu_s, n, 0, _NO_NEW, n)
        engine._mark_busy(t, t + gpu_s)
        t += wall
        walls.append(wall)
    return walls


def _finish(engine: EngineModel, start: float, walls: list[float]) -> None:
    from agents.sim.engine_model import StepStats

    m, n = len(walls), len(engine.running)
    end = start + sum(walls)
    first_end = start + walls[0]
    stats = StepStats(start=start, end=end, tokens=n, generation_tokens=n * m, steps=m,
                      itl_runs=[(wall, n) for wall in walls[1:]])
    grown = 0
    for r in engine.running:
        stats.itls.append(first_end - r.last_token_ts)
        r.computed += m
        r.generated += m
        r.last_token_ts = end
        blocks = engine._blocks_for(r.computed)
        grown += blocks - r.blocks
        r.blocks = blocks
    engine.used_blocks += grown
    engine.now = end
    if engine.sink is not None:
        engine.sink.on_step(stats)


class _NoNew:
    new_requests = 0
    new_prompt_tokens = 0


_NO_NEW = _NoNew()
