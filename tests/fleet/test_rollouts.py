"""Rollouts driven as they run: a service change saved through services.save, the agents
reporting what their supervisors do (drain, start, ready) and the router agent reporting its
workers, the controller ticking on a clock the test moves."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertRule, AlertState
from controlplane.fleet import rollouts
from controlplane.fleet.models import (
    Deployment,
    DeploymentRevision,
    DeploymentState,
    Host,
    Rollout,
    RolloutState,
    Service,
    ServiceEvent,
    ServiceEventKind,
)
from controlplane.tuning import service as tuning
from controlplane.tuning.models import Kind, State, Suggestion
from tests.fleet.controller_support import (
    ITL_BOUNDS,
    TTFT_BOUNDS,
    Agents,
    Clock,
    change_args,
    crashes_with,
    engine_rows,
    hosts,
    layout,
    make_service,
    replicas,
    router_host,
    run,
)

# Minutes of a service's life ticked through the controller, a few seconds a test: `make
# test` runs them (early, beside the other slow ones), `make test-fast` leaves them out.
pytestmark = pytest.mark.slow(seconds=5)


def start(n_hosts: int = 3, replicas_: int = 3, **fields):
    fleet = hosts(n_hosts)
    router = router_host()
    service = make_service(router, replicas=replicas_, **fields)
    agents, clock = Agents(service, router), Clock()
    run(clock, agents, lambda: all(d.in_rotation for d in replicas(service)))
    return service, agents, clock, fleet


def rollout_of(service: Service) -> Rollout:
    return Rollout.objects.filter(service=service).order_by("-id").first()


def ended(service: Service):
    return lambda: rollout_of(service).state != RolloutState.RUNNING


def out_of_rotation(service: Service) -> int:
    return sum(not d.in_rotation for d in replicas(service))


@pytest.fixture
def rolling(db):
    """Three replicas on three hosts of two GPUs, no surge: plain rolling."""
    return start()


def test_a_rolling_change_goes_through_the_replicas_in_order_one_out_at_a_time(rolling):
    service, agents, clock, _ = rolling
    change_args(service, max_num_seqs=256)
    rollout = rollout_of(service)
    assert rollout.state == RolloutState.RUNNING and rollout.to_revision == service.revision
    most_out = []
    run(clock, agents, ended(service), each=lambda: most_out.append(out_of_rotation(service)))
    rollout = rollout_of(service)
    assert rollout.state == RolloutState.SUCCEEDED, rollout.detail
    assert max(most_out) == 1 and most_out[-1] == 0
    assert all(d.args["max_num_seqs"] == 256 and d.in_rotation for d in replicas(service))
    # one replica after another, in slot order: each saved only after the one before it was
    # checked
    saved = [e.deployment.replica for e in ServiceEvent.objects.filter(
        service=service, kind=ServiceEventKind.REPLICA_CHANGED, data__phase="draining")
        .order_by("id")]
    checked = [e.deployment.replica for e in ServiceEvent.objects.filter(
        service=service, kind=ServiceEventKind.REPLICA_CHANGED, data__phase="checking")
        .order_by("id")]
    assert saved == checked == [0, 1, 2]
    assert rollout.done == [d.pk for d in replicas(service)]
    assert ServiceEvent.objects.filter(service=service,
                                       kind=ServiceEventKind.ROLLOUT_SUCCEEDED).count() == 1
    for d in replicas(service):
        newest = DeploymentRevision.objects.filter(deployment=d).order_by("-revision").first()
        assert newest.reason == f"rollout of service revision {service.revision}"


def test_the_router_must_drop_a_replica_before_it_is_restarted(rolling):
    service, agents, clock, _ = rolling
    change_args(service, max_num_seqs=256)
    first = replicas(service)[0]
    clock.tick()  # the rollout takes replica 0 out; the router agent has not reported since
    assert rollout_of(service).phase == rollouts.Phase.OUT
    clock.tick(1)
    assert Deployment.objects.get(pk=first.pk).revision == first.revision  # not yet saved
    agents.route(clock.now)  # the router agent applied its config: 0 is not a worker
    clock.tick(1)
    assert rollout_of(service).phase == rollouts.Phase.DRAINING
    assert Deployment.objects.get(pk=first.pk).revision == first.revision + 1


def test_a_replica_that_never_becomes_ready_rolls_the_change_back_and_alerts(rolling):
    service, agents, clock, _ = rolling
    old_args = dict(service.args)
    agents.script(0, crashes_with(max_num_seqs=4096))
    change_args(service, max_num_seqs=4096)
    bad_revision = service.revision
    run(clock, agents, ended(service))
    rollout = Rollout.objects.get(service=service, to_revision=bad_revision)
    assert rollout.state == RolloutState.ROLLED_BACK
    assert "llama-0 was not ready within 300 s (state crashed" in rollout.detail
    assert "exit 1: bad flag" in rollout.detail
    # every replica runs the old arguments again; the one that changed has a new revision
    first = replicas(service)[0]
    assert [d.args for d in replicas(service)] == [old_args] * 3
    newest = DeploymentRevision.objects.filter(deployment=first).order_by("-revision").first()
    assert newest.reason.startswith("rollback: llama-0 was not ready within 300 s")
    # the service's desired config is back too (heals and new replicas take it)
    service.refresh_from_db()
    assert service.args == old_args and service.revision == bad_revision + 1
    [event] = ServiceEvent.objects.filter(service=service, kind=ServiceEventKind.ROLLED_BACK)
    assert event.data["restored"] == ["llama-0"] and "not ready" in event.message
    # the rollback's own rollout has nothing left to do
    assert rollout_of(service).state == RolloutState.SUCCEEDED
    # the old config comes back into rotation
    run(clock, agents, lambda: all(d.in_rotation for d in replicas(service)))
    # alerted: the default pack's service_disrupted rule
    rule = AlertRule.objects.get(pack_key="service-disrupted")
    evaluate(clock.now, rule_ids=[rule.pk])
    alert = Alert.objects.get(rule=rule)
    assert alert.state == AlertState.FIRING and alert.target == f"service:{service.pk}"
    assert alert.summary.startswith("service llama: 1 disruption(s)")


def slower_canary(service, clock, slow_for_s: float, equal_for_s: float = 0.0):
    """Engine rows from now: the canary's TTFT p99 four times the others' for ``slow_for_s``,
    then the same as theirs for ``equal_for_s``."""
    canary, *others = replicas(service)
    ttft, itl = layout(TTFT_BOUNDS), layout(ITL_BOUNDS)
    common = {"requests_running": 8.0, "requests_waiting": 0.0, "generation_tokens_per_s": 500.0,
              "requests_finished_per_s": 2.0, "finished_error_per_s": 0.0,
              "ttft_seconds_layout": ttft, "itl_seconds_layout": itl,
              "itl_seconds_counts": [0, 10, 0, 0, 0, 0]}
    fast, slow = [2, 8, 0, 0, 0, 0, 0], [0, 0, 0, 2, 8, 0, 0]
    lo = clock.now
    turn, hi = lo + timedelta(seconds=slow_for_s), lo + timedelta(seconds=slow_for_s + equal_for_s)
    engine_rows(canary, lo, turn, **common, ttft_seconds_counts=slow)
    if equal_for_s:
        engine_rows(canary, turn + timedelta(seconds=2), hi, **common, ttft_seconds_counts=fast)
    for d in others:
        engine_rows(d, lo, hi, **common, ttft_seconds_counts=fast)
    return canary


def test_a_canary_judged_regressed_twice_running_is_rolled_back(db):
    service, agents, clock, _ = start(strategy="canary", canary_window_s=60)
    change_args(service, max_num_seqs=512)
    changed = service.revision
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    assert replicas(service)[0].args["max_num_seqs"] == 512
    # over the canary window and the second look after it, the canary's TTFT p99 is four
    # times the others'
    slower_canary(service, clock, slow_for_s=200)
    run(clock, agents, ended(service))
    rollout = Rollout.objects.get(service=service, to_revision=changed)
    assert rollout.state == RolloutState.ROLLED_BACK
    assert ("llama-0 regressed against the replicas not yet changed, twice running; over the "
            "last 30 s") in rollout.detail
    assert "ttft_p99_s" in rollout.detail
    [suspect] = ServiceEvent.objects.filter(service=service, data__verdict="suspect")
    assert "worse than the replicas not yet changed over 60 s" in suspect.message
    assert [d.args["max_num_seqs"] for d in replicas(service)] == [128, 128, 128]


def test_a_canary_worse_only_in_its_first_check_is_judged_again_and_goes_on(db):
    service, agents, clock, _ = start(strategy="canary", canary_window_s=60)
    change_args(service, max_num_seqs=512)
    changed = service.revision
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    # slow through its first check (settle 15 s + the 60-s window), then as fast as the others
    slower_canary(service, clock, slow_for_s=70, equal_for_s=300)
    run(clock, agents, lambda: rollout_of(service).phase != rollouts.Phase.CHECKING)
    assert rollout_of(service).phase == rollouts.Phase.CONFIRMING
    run(clock, agents, ended(service))
    rollout = Rollout.objects.get(service=service, to_revision=changed)
    assert rollout.state == RolloutState.SUCCEEDED, rollout.detail
    verdicts = [e.data["verdict"] for e in ServiceEvent.objects.filter(
        service=service, data__phase="checking").order_by("id")]
    assert verdicts[:2] == ["suspect", State.UNCHANGED]


def test_a_wider_latency_guard_lets_a_slower_canary_go_on(db, settings):
    # replicas on shared CPU hosts read several times apart with no change at all: the
    # operator widens the latency guard, and the same canary as above is judged unchanged
    settings.PITWALL = {**settings.PITWALL, "ROLLOUT_LATENCY_GUARD": 20.0}
    service, agents, clock, _ = start(strategy="canary", canary_window_s=60)
    change_args(service, max_num_seqs=512)
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    slower_canary(service, clock, slow_for_s=200)
    run(clock, agents, ended(service))
    assert rollout_of(service).state == RolloutState.SUCCEEDED, rollout_of(service).detail
    first = ServiceEvent.objects.filter(service=service, data__phase="checking").order_by(
        "id").first()
    assert first.data["verdict"] == State.UNCHANGED
    ratio = re.search(r"ttft_p99_s \S+ -> \S+ \(\+(\d+)%\)", first.message)
    assert ratio and 100 < int(ratio[1]) < 2000, first.message  # slower, within the guard


def test_a_canary_within_the_guards_lets_the_rollout_go_on(db):
    service, agents, clock, _ = start(strategy="canary", canary_window_s=60)
    change_args(service, max_num_seqs=512)
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    ttft, itl = layout(TTFT_BOUNDS), layout(ITL_BOUNDS)
    lo, hi = clock.now, clock.now + timedelta(seconds=61)
    for d in replicas(service):
        engine_rows(d, lo, hi, requests_running=8.0, generation_tokens_per_s=500.0,
                    requests_finished_per_s=2.0, ttft_seconds_layout=ttft,
                    ttft_seconds_counts=[2, 8, 0, 0, 0, 0, 0], itl_seconds_layout=itl,
                    itl_seconds_counts=[0, 10, 0, 0, 0, 0])
    run(clock, agents, ended(service))
    assert rollout_of(service).state == RolloutState.SUCCEEDED
    verdicts = [e.data["verdict"] for e in ServiceEvent.objects.filter(
        service=service, data__phase="checking").order_by("id")]
    assert verdicts == [State.UNCHANGED] * 3


def test_a_canary_that_the_router_sends_less_is_not_judged_by_its_throughput(db):
    service, agents, clock, _ = start(strategy="canary", canary_window_s=60)
    change_args(service, max_num_seqs=512)
    changed = service.revision
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    ttft, itl = layout(TTFT_BOUNDS), layout(ITL_BOUNDS)
    lo, hi = clock.now, clock.now + timedelta(seconds=61)
    for d in replicas(service):
        engine_rows(d, lo, hi, requests_running=8.0, requests_finished_per_s=2.0,
                    generation_tokens_per_s=100.0 if d.replica == 0 else 500.0,
                    ttft_seconds_layout=ttft, ttft_seconds_counts=[2, 8, 0, 0, 0, 0, 0],
                    itl_seconds_layout=itl, itl_seconds_counts=[0, 10, 0, 0, 0, 0])
    run(clock, agents, ended(service))
    rollout = Rollout.objects.get(service=service, to_revision=changed)
    assert rollout.state == RolloutState.SUCCEEDED, rollout.detail


def test_the_first_seconds_back_in_the_router_are_not_judged(db, settings):
    settings.PITWALL = {**settings.PITWALL, "ROLLOUT_SETTLE_S": 15}
    service, agents, clock, _ = start(strategy="canary", canary_window_s=60)
    change_args(service, max_num_seqs=512)
    changed = service.revision
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    ttft, itl = layout(TTFT_BOUNDS), layout(ITL_BOUNDS)
    lo = clock.now
    settled, hi = lo + timedelta(seconds=16), lo + timedelta(seconds=90)
    common = {"requests_running": 8.0, "requests_finished_per_s": 2.0,
              "ttft_seconds_layout": ttft, "itl_seconds_layout": itl,
              "itl_seconds_counts": [0, 10, 0, 0, 0, 0]}
    canary, *others = replicas(service)
    # its warm-up and the router's burst: four times slower, then as fast as the others
    engine_rows(canary, lo, settled - timedelta(seconds=1), **common,
                ttft_seconds_counts=[0, 0, 0, 2, 8, 0, 0])
    engine_rows(canary, settled, hi, **common, ttft_seconds_counts=[2, 8, 0, 0, 0, 0, 0])
    for d in others:
        engine_rows(d, lo, hi, **common, ttft_seconds_counts=[2, 8, 0, 0, 0, 0, 0])
    run(clock, agents, ended(service))
    rollout = Rollout.objects.get(service=service, to_revision=changed)
    assert rollout.state == RolloutState.SUCCEEDED, rollout.detail


def test_a_p99_of_a_few_requests_is_not_judged_the_check_goes_on_then_counts_failures(db):
    service, agents, clock, _ = start(strategy="canary", canary_window_s=60)
    change_args(service, max_num_seqs=512)
    changed = service.revision
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    ttft, itl = layout(TTFT_BOUNDS), layout(ITL_BOUNDS)
    lo = clock.now
    hi = lo + timedelta(seconds=60 * rollouts.CHECK_EXTEND + 10)
    # a request every 30 s on each replica, the canary's four times slower: 9 requests each
    for d in replicas(service):
        engine_rows(d, lo, hi, step_s=30.0, requests_running=1.0, requests_finished_per_s=0.03,
                    ttft_seconds_layout=ttft, itl_seconds_layout=itl,
                    ttft_seconds_counts=[0, 0, 0, 1, 0, 0, 0] if d.replica == 0 else
                    [1, 0, 0, 0, 0, 0, 0])
    run(clock, agents, lambda: rollout_of(service).phase != rollouts.Phase.CHECKING
        or clock.now > lo + timedelta(seconds=100))
    assert rollout_of(service).phase == rollouts.Phase.CHECKING  # past 60 s, still checking
    run(clock, agents, ended(service))
    rollout = Rollout.objects.get(service=service, to_revision=changed)
    assert rollout.state == RolloutState.SUCCEEDED, rollout.detail
    first = ServiceEvent.objects.filter(service=service, data__phase="checking").order_by(
        "id").first()
    assert "latencies not compared: " in first.message and "fewer than 20" in first.message


def test_failed_requests_on_the_changed_replica_roll_back(rolling):
    service, agents, clock, _ = rolling
    change_args(service, max_num_seqs=512)
    changed = service.revision
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    lo, hi = clock.now, clock.now + timedelta(seconds=120)  # the check and its second look
    first, *others = replicas(service)
    engine_rows(first, lo, hi, requests_running=4.0, generation_tokens_per_s=400.0,
                requests_finished_per_s=2.0, finished_error_per_s=0.5)
    for d in others:
        engine_rows(d, lo, hi, requests_running=4.0, generation_tokens_per_s=400.0,
                    requests_finished_per_s=2.0, finished_error_per_s=0.0)
    run(clock, agents, ended(service))
    rollout = Rollout.objects.get(service=service, to_revision=changed)
    assert rollout.state == RolloutState.ROLLED_BACK
    assert "failed requests 25.0% of finished, against 0.0%" in rollout.detail


def test_a_new_change_supersedes_the_running_rollout(rolling):
    service, agents, clock, _ = rolling
    change_args(service, max_num_seqs=256)
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.STARTING)
    first = rollout_of(service)
    change_args(service, max_num_seqs=64)
    first.refresh_from_db()
    assert first.state == RolloutState.SUPERSEDED and first.ended_at is not None
    most_out = []
    run(clock, agents, ended(service), each=lambda: most_out.append(out_of_rotation(service)))
    assert rollout_of(service).state == RolloutState.SUCCEEDED
    assert max(most_out) == 1
    assert [d.args["max_num_seqs"] for d in replicas(service)] == [64, 64, 64]
    started = ServiceEvent.objects.filter(service=service,
                                          kind=ServiceEventKind.ROLLOUT_STARTED).latest("id")
    assert "supersedes the rollout to revision" in started.message


def test_with_spare_gpus_a_surge_replica_keeps_capacity_whole(db):
    service, agents, clock, fleet = start(max_surge=1)
    before = {d.replica: d.pk for d in replicas(service)}
    change_args(service, max_num_seqs=256)
    in_rotation = []
    run(clock, agents, ended(service),
        each=lambda: in_rotation.append(sum(d.in_rotation for d in replicas(service))))
    assert rollout_of(service).state == RolloutState.SUCCEEDED, rollout_of(service).detail
    assert min(in_rotation) >= 3  # never fewer replicas serving than the service has
    now = replicas(service)
    assert sorted(d.replica for d in now) == [0, 1, 2]
    assert all(d.args["max_num_seqs"] == 256 and d.in_rotation for d in now)
    assert not {d.pk for d in now} & set(before.values())  # every old one was retired
    surges = ServiceEvent.objects.filter(service=service, data__phase="surge_starting")
    assert surges.count() == 3


def test_replicas_without_gpus_roll_in_place_though_a_surge_is_allowed(db):
    """vLLM's CPU build: a surge replica would start on the cores the serving ones use."""
    for i in range(2):
        Host.objects.create(hostname=f"cpu-{i}", last_seen=timezone.now(), cpu_count=2,
                            inventory={"labels": {"pool": "cpu"}, "address": "127.0.0.1",
                                       "port_range": [7000 + 100 * i, 7099 + 100 * i]})
    router = router_host()
    service = make_service(router, replicas=2, selector={"pool": "cpu"}, max_surge=1)
    agents, clock = Agents(service, router), Clock()
    run(clock, agents, lambda: all(d.in_rotation for d in replicas(service)))
    assert all(d.gpu_indices == [] for d in replicas(service))
    change_args(service, max_num_seqs=256)
    run(clock, agents, ended(service))
    assert rollout_of(service).state == RolloutState.SUCCEEDED, rollout_of(service).detail
    assert len(replicas(service)) == 2
    assert not ServiceEvent.objects.filter(service=service, data__phase="surge_starting")


def test_an_accepted_suggestion_for_a_replica_rolls_through_its_service(rolling):
    service, agents, clock, _ = rolling
    d = replicas(service)[1]
    suggestion = Suggestion.objects.create(
        deployment=d, kind=Kind.CONCURRENCY_CAP, revision=d.revision,
        changes=[{"field": "args.max_num_seqs", "current": 128, "proposed": 192}],
        reasoning="r", expected="e", confidence=0.9, severity=1.0)
    tuning.accept(suggestion)
    service.refresh_from_db()
    assert service.args["max_num_seqs"] == 192
    assert rollout_of(service).state == RolloutState.RUNNING
    run(clock, agents, ended(service))
    assert [x.args["max_num_seqs"] for x in replicas(service)] == [192, 192, 192]
    # placement's fields are not a suggestion's to change on a replica
    cpus = Suggestion.objects.create(
        deployment=d, kind=Kind.NUMA_MISMATCH, revision=Deployment.objects.get(pk=d.pk).revision,
        changes=[{"field": "cpus", "current": None, "proposed": [0, 1]}], reasoning="r",
        expected="e", confidence=0.9, severity=1.0)
    with pytest.raises(tuning.Refused, match="placement chooses its cpus"):
        tuning.accept(cpus)


def test_advancing_again_without_news_changes_nothing(rolling):
    service, agents, clock, _ = rolling
    change_args(service, max_num_seqs=256)
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.STARTING)
    rollout = rollout_of(service)
    events = ServiceEvent.objects.filter(service=service).count()
    for _ in range(3):
        rollouts.advance(rollout, clock.now)
    again = rollout_of(service)
    assert (again.phase, again.phase_since, again.current_id) == (
        rollout.phase, rollout.phase_since, rollout.current_id)
    assert ServiceEvent.objects.filter(service=service).count() == events


def test_the_ready_timeout_follows_the_slowest_start_seen(rolling, settings):
    settings.PITWALL = {**settings.PITWALL, "ROLLOUT_READY_MIN_S": 120}
    service, _, _, _ = rolling
    assert rollouts.ready_timeout_s(service) == 120
    Deployment.objects.filter(pk=replicas(service)[0].pk).update(
        start_phases={"process_start": 1000.0, "api_ready": 1100.0})
    assert rollouts.ready_timeout_s(service) == 300
    Deployment.objects.filter(pk=replicas(service)[1].pk).update(
        start_phases={"process_start": 1000.0, "api_ready": 2000.0})
    assert rollouts.ready_timeout_s(service) == 1800


def test_a_crashed_replica_is_changed_first_and_costs_no_capacity(rolling):
    service, agents, clock, _ = rolling
    broken = replicas(service)[2]
    agents.script(2, lambda d: None)  # its agent reports nothing new
    Deployment.objects.filter(pk=broken.pk).update(state=DeploymentState.CRASHED)
    clock.tick()
    agents.scripts.clear()
    change_args(service, max_num_seqs=256)
    most_out = []
    run(clock, agents, ended(service), each=lambda: most_out.append(out_of_rotation(service)))
    saved = [e.deployment.replica for e in ServiceEvent.objects.filter(
        service=service, data__phase="draining").order_by("id")]
    assert saved == [2, 0, 1]
    assert max(most_out) == 1


def test_a_replica_whose_host_is_offline_gets_the_change_without_holding_the_rollout(
        db, settings):
    # two may be out at once (the offline one counts); healing would replace it later
    settings.PITWALL = {**settings.PITWALL, "HEAL_OFFLINE_S": 10**6}
    service, agents, clock, _ = start(max_unavailable=2)
    away = replicas(service)[1]
    agents.hosts.remove(away.host_id)  # its agent stops reporting
    agents.script(1, lambda d: None)
    Host.objects.filter(pk=away.host_id).update(last_seen=clock.now - timedelta(seconds=40))
    change_args(service, max_num_seqs=256)
    most_out = []
    run(clock, agents, ended(service), each=lambda: most_out.append(out_of_rotation(service)))
    assert rollout_of(service).state == RolloutState.SUCCEEDED
    stays = Deployment.objects.get(pk=away.pk)
    assert stays.args["max_num_seqs"] == 256 and stays.running_revision == away.revision
    [event] = ServiceEvent.objects.filter(deployment=stays, data__phase="",
                                          kind=ServiceEventKind.REPLICA_CHANGED)
    assert "saved without waiting (its host is offline)" in event.message
    assert max(most_out) == 2


def test_a_change_during_a_surge_leaves_one_replica_per_slot(db):
    service, agents, clock, _ = start(max_surge=1)
    change_args(service, max_num_seqs=256)
    run(clock, agents, lambda: rollout_of(service).phase == rollouts.Phase.CHECKING)
    assert len(replicas(service)) == 4  # the surge replica beside the three
    change_args(service, max_num_seqs=64)
    assert sorted(d.replica for d in replicas(service)) == [0, 1, 2]
    run(clock, agents, ended(service))
    assert rollout_of(service).state == RolloutState.SUCCEEDED
    assert [d.args["max_num_seqs"] for d in replicas(service)] == [64, 64, 64]
