"""The run store: restart versus stale pushes, counters, limits and expiry on a fake clock."""

from __future__ import annotations

import pytest

from mirrorwatch.exporter.ingest.store import Limits, PushRefusedError, PutOutcome, RunStore
from mirrorwatch.exporter.settings import Settings
from tests.exporter.ingest_snapshots import FakeClock, snapshot


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> RunStore:
    limits = Limits(
        max_runs=2, max_workers_per_run=2, max_workers=3, max_replicas=4, ttl_seconds=60
    )
    return RunStore(limits, clock)


def refused(store: RunStore, run: str, worker: int, **changes: object) -> PushRefusedError:
    with pytest.raises(PushRefusedError) as caught:
        store.put(run, worker, snapshot(**changes))
    return caught.value


def test_a_first_push_creates_the_worker(store: RunStore) -> None:
    assert store.put("r", 0, snapshot()) is PutOutcome.CREATED
    (view,) = store.views()
    assert (view.entry.run, view.entry.worker, view.active) == ("r", 0, True)


def test_the_same_push_again_is_accepted_unchanged(store: RunStore) -> None:
    store.put("r", 0, snapshot())
    assert store.put("r", 0, snapshot()) is PutOutcome.UNCHANGED
    assert store.views()[0].entry.snapshot.steps_total == 100


def test_a_newer_sequence_replaces_the_totals(store: RunStore) -> None:
    store.put("r", 0, snapshot())
    assert store.put("r", 0, snapshot(sequence=2, steps_total=150)) is PutOutcome.UPDATED
    assert store.views()[0].entry.snapshot.steps_total == 150


def test_an_older_sequence_of_the_same_session_is_stale(store: RunStore) -> None:
    store.put("r", 0, snapshot(sequence=5))
    error = refused(store, "r", 0, sequence=4)
    assert (error.kind, error.subject) == ("stale", "sequence")
    assert store.views()[0].entry.snapshot.sequence == 5


def test_the_same_sequence_with_other_content_is_refused(store: RunStore) -> None:
    store.put("r", 0, snapshot())
    error = refused(store, "r", 0, steps_total=101)
    assert error.kind == "stale"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"steps_total": 99}, "steps_total"),
        ({"examples_total": 10}, "examples_total"),
        ({"telemetry_dropped_total": 0}, "telemetry_dropped_total"),
        (
            {"step_duration_seconds": {"bucket_counts": [0] * 14, "count": 0, "sum_seconds": 0}},
            "step_duration_seconds.count",
        ),
    ],
)
def test_a_counter_going_down_within_a_session_is_invalid(
    store: RunStore, changes: dict[str, object], field: str
) -> None:
    store.put("r", 0, snapshot())
    error = refused(store, "r", 0, sequence=2, **changes)
    assert (error.kind, error.subject) == ("invalid", field)
    assert error.message.startswith("went down from ")


def test_a_new_session_is_a_restart_and_its_counters_start_again(store: RunStore) -> None:
    store.put("r", 0, snapshot(sequence=9))
    outcome = store.put("r", 0, snapshot(session="s-2", sequence=1, steps_total=5))
    assert outcome is PutOutcome.RESTARTED
    assert store.views()[0].entry.snapshot.steps_total == 5


def test_a_late_retry_from_before_a_restart_is_stale(store: RunStore) -> None:
    store.put("r", 0, snapshot(sequence=9))
    store.put("r", 0, snapshot(session="s-2", sequence=1, steps_total=5))
    error = refused(store, "r", 0, sequence=9)
    assert (error.kind, error.subject) == ("stale", "session")
    assert store.views()[0].entry.snapshot.session == "s-2"


def test_a_silent_worker_reads_inactive_after_one_ttl(store: RunStore, clock: FakeClock) -> None:
    store.put("r", 0, snapshot())
    clock.advance(59.9)
    assert store.views()[0].active
    clock.advance(0.1)
    assert not store.views()[0].active


def test_a_silent_worker_is_forgotten_after_two_ttls(store: RunStore, clock: FakeClock) -> None:
    store.put("r", 0, snapshot())
    clock.advance(119.9)
    assert len(store.views()) == 1
    clock.advance(0.1)
    assert store.views() == []


def test_a_finished_worker_is_forgotten_after_one_ttl(store: RunStore, clock: FakeClock) -> None:
    store.put("r", 0, snapshot(active=False))
    store.put("r", 1, snapshot())
    clock.advance(59.9)
    assert [view.active for view in store.views()] == [False, True]
    clock.advance(0.1)
    assert [(view.entry.worker, view.active) for view in store.views()] == [(1, False)]


def test_a_push_keeps_a_worker_fresh(store: RunStore, clock: FakeClock) -> None:
    store.put("r", 0, snapshot())
    clock.advance(50)
    store.put("r", 0, snapshot(sequence=2))
    clock.advance(50)
    assert [view.active for view in store.views()] == [True]


def test_a_finished_worker_reads_inactive_at_once(store: RunStore) -> None:
    store.put("r", 0, snapshot(active=False))
    assert not store.views()[0].active


def test_expiry_frees_room_under_the_limits(store: RunStore, clock: FakeClock) -> None:
    store.put("a", 0, snapshot())
    store.put("b", 0, snapshot())
    assert refused(store, "c", 0).kind == "over_limit"
    clock.advance(120)
    assert store.put("c", 0, snapshot()) is PutOutcome.CREATED


def test_one_run_too_many_is_over_the_limit(store: RunStore) -> None:
    store.put("a", 0, snapshot())
    store.put("b", 0, snapshot())
    error = refused(store, "c", 0)
    assert (error.kind, error.subject, error.limit) == ("over_limit", "run", "max_runs")
    assert store.put("a", 1, snapshot()) is PutOutcome.CREATED  # a known run may grow


def test_one_worker_too_many_in_a_run_is_over_the_limit(store: RunStore) -> None:
    for worker in range(2):
        store.put("a", worker, snapshot())
    error = refused(store, "a", 2)
    assert (error.kind, error.subject, error.limit) == (
        "over_limit",
        "worker",
        "max_workers_per_run",
    )
    assert "--max-workers-per-run" in error.message
    assert store.put("a", 1, snapshot(sequence=2)) is PutOutcome.UPDATED  # known ones go on
    assert store.put("b", 0, snapshot()) is PutOutcome.CREATED  # another run has room


def test_one_worker_too_many_in_all_is_over_the_limit(store: RunStore) -> None:
    for run, worker in (("a", 0), ("a", 1), ("b", 0)):
        store.put(run, worker, snapshot())
    error = refused(store, "b", 1)
    assert (error.kind, error.subject, error.limit) == ("over_limit", "worker", "max_workers")
    assert "--max-workers)" in error.message


def test_too_many_replicas_is_over_the_limit(store: RunStore) -> None:
    error = refused(store, "a", 0, replicas=5)
    assert (error.kind, error.subject, error.limit) == ("over_limit", "replicas", "max_replicas")


def test_a_replica_listed_twice_is_invalid(store: RunStore) -> None:
    device = {"replica": 0, "device": "/device:GPU:0"}
    error = refused(store, "a", 0, replica_devices=[device, device])
    assert (error.kind, error.subject) == ("invalid", "replica_devices[1].replica")


def test_delete_forgets_the_worker_and_its_run(store: RunStore) -> None:
    store.put("a", 0, snapshot())
    store.put("b", 0, snapshot())
    assert store.delete("a", 0)
    assert not store.delete("a", 0)
    assert store.put("c", 0, snapshot()) is PutOutcome.CREATED  # run "a" no longer counts


# --- the default limits, at their boundaries --------------------------------------------------

DEFAULTS = Limits.from_settings(Settings())


@pytest.fixture
def host_store(clock: FakeClock) -> RunStore:
    return RunStore(DEFAULTS, clock)


def replicas_body(count: int) -> dict[str, object]:
    devices = [{"replica": i, "device": f"/device:GPU:{i}"} for i in range(count)]
    return {"replicas": count, "replica_devices": devices}


def test_the_last_run_the_defaults_allow_is_taken_and_the_next_refused(
    host_store: RunStore,
) -> None:
    for run in range(DEFAULTS.max_runs):
        assert host_store.put(f"run-{run}", 0, snapshot()) is PutOutcome.CREATED
    error = refused(host_store, "one-more", 0)
    assert (error.kind, error.limit) == ("over_limit", "max_runs")
    assert f"already tracks {DEFAULTS.max_runs} runs (--max-runs)" in error.message


def test_the_last_worker_of_a_run_the_defaults_allow_is_taken_and_the_next_refused(
    host_store: RunStore,
) -> None:
    for worker in range(DEFAULTS.max_workers_per_run):
        assert host_store.put("r", worker, snapshot()) is PutOutcome.CREATED
    error = refused(host_store, "r", DEFAULTS.max_workers_per_run)
    assert (error.kind, error.subject, error.limit) == (
        "over_limit",
        "worker",
        "max_workers_per_run",
    )


def test_the_last_worker_in_all_the_defaults_allow_is_taken_and_the_next_refused(
    host_store: RunStore,
) -> None:
    per_run = DEFAULTS.max_workers_per_run
    for index in range(DEFAULTS.max_workers):
        run, worker = divmod(index, per_run)
        assert host_store.put(f"run-{run}", worker, snapshot()) is PutOutcome.CREATED
    runs_used = DEFAULTS.max_workers // per_run
    assert runs_used < DEFAULTS.max_runs  # so the run limit is not what refuses below
    error = refused(host_store, f"run-{runs_used}", 0)
    assert (error.kind, error.subject, error.limit) == ("over_limit", "worker", "max_workers")


def test_the_most_replicas_the_defaults_allow_are_taken(host_store: RunStore) -> None:
    body = replicas_body(DEFAULTS.max_replicas)
    assert host_store.put("r", 0, snapshot(**body)) is PutOutcome.CREATED
    assert len(host_store.views()[0].entry.snapshot.replica_devices) == DEFAULTS.max_replicas


@pytest.mark.parametrize("field", ["replicas", "replica_devices"])
def test_one_replica_more_than_the_defaults_allow_is_refused(
    host_store: RunStore, field: str
) -> None:
    most = DEFAULTS.max_replicas
    body = replicas_body(most)
    body[field] = replicas_body(most + 1)[field]
    error = refused(host_store, "r", 0, **body)
    assert (error.kind, error.subject, error.limit) == ("over_limit", field, "max_replicas")
    assert host_store.views() == []
