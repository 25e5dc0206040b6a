"""The cost model: how measured per-task costs become wall time, workers and a token bill."""

from __future__ import annotations

import math

import pytest

from dareforge.plan import (
    MAPPED,
    MAX_MAPPED_INSTANCES,
    SERIAL_INSTANCES,
    SOURCES_PER_INSTANCE,
    VCPU_HOUR_USD,
    Measured,
    Price,
    Shape,
    dollars_per_verified,
    plan_lines,
    project,
    token_bill,
    workers_for,
)
from dareforge.store import Store

MEASURED = Measured(
    tasks=200,
    sources=40,
    stage_cpu_s={"crawl": 10, "filter": 2, "understand": 100, "prepare": 40, "generate": 300, "validate": 80},
    task_instance_cpu_s=2.0,
    tokens={"probe attempt": (1000, 100), "trajectory": (5000, 400), "judgement": (3000, 150)},
    token_counter="a test",
    accepted=160,
)


def test_mapped_stages_spread_over_the_cluster_and_serial_ones_do_not():
    one, four = project(MEASURED, 10_000, Shape(1)), project(MEASURED, 10_000, Shape(4))
    assert one.serial_s == four.serial_s == 10_000 * (10 + 2 + 80) / 200
    assert one.mapped_s == 10_000 * 440 / 200 / 2  # 2 slots on 2 cores
    assert four.mapped_s == one.mapped_s / 4
    # 2,000 sources go SOURCES_PER_INSTANCE[stage] to an instance of each mapped stage, each starting once
    batches = {stage: math.ceil(2_000 / SOURCES_PER_INSTANCE[stage]) for stage in MAPPED}
    assert batches == {"understand": 21, "prepare": 21, "generate": 125, "check": 125}
    assert one.airflow_s == pytest.approx((sum(batches.values()) + SERIAL_INSTANCES) * 2.0 / 2)
    huge = project(MEASURED, 100_000, Shape(1))  # 20,000 sources: at most MAX_MAPPED_INSTANCES per stage
    capped = {
        stage: min(math.ceil(20_000 / SOURCES_PER_INSTANCE[stage]), MAX_MAPPED_INSTANCES) for stage in MAPPED
    }
    assert capped == {
        "understand": 209,
        "prepare": 209,
        "generate": MAX_MAPPED_INSTANCES,
        "check": MAX_MAPPED_INSTANCES,
    }
    assert huge.airflow_s == pytest.approx((sum(capped.values()) + SERIAL_INSTANCES) * 2.0 / 2)


def test_a_worker_has_the_parallelism_of_its_slots_or_its_cores_whichever_is_fewer():
    assert Shape(2, slots_per_worker=2, cores_per_worker=1).parallel == 2
    assert Shape(2, slots_per_worker=2, cores_per_worker=8).parallel == 4


def test_workers_for_is_the_fewest_that_finish_in_time():
    hours = 3.0
    needed = workers_for(MEASURED, 10_000, hours)
    assert project(MEASURED, 10_000, Shape(needed)).wall_s <= hours * 3600
    assert project(MEASURED, 10_000, Shape(needed - 1)).wall_s > hours * 3600
    serial_hours = project(MEASURED, 10_000, Shape(1)).serial_s / 3600
    # Amdahl: no cluster beats the serial part.
    assert workers_for(MEASURED, 10_000, serial_hours * 0.9) is None


def test_the_token_bill_counts_every_call_at_every_price():
    bill = token_bill(
        MEASURED, 1000, probe_models=3, probe_samples=2, k=4, train_share=0.5, prices=(Price("m", 1.0, 10.0),)
    )
    assert bill.units == {"probe attempt": 6000, "trajectory": 2000, "judgement": 2000}
    prompt = 6000 * 1000 + 2000 * 5000 + 2000 * 3000
    completion = 6000 * 100 + 2000 * 400 + 2000 * 150
    assert bill.dollars["m"] == pytest.approx((prompt * 1.0 + completion * 10.0) / 1e6)


def test_the_measurement_round_trips_through_the_store_and_reads_as_a_plan(tmp_path):
    store = Store(str(tmp_path))
    assert Measured.load(store) is None
    MEASURED.save(store)
    assert Measured.load(store) == MEASURED
    lines = plan_lines(MEASURED, tasks=10_000)
    assert any(line.startswith("10,000 tasks on 4 x (2 slots, 2 cores)") for line in lines)
    assert any("token bill" in line and "a test" in line for line in lines)


def test_dollars_per_verified_task_price_every_stage_s_cpu_over_the_accepted_tasks():
    cpu_per_verified = (10 + 2 + 100 + 40 + 300 + 80) / 160
    assert MEASURED.cpu_per_accepted() == pytest.approx(cpu_per_verified)
    assert dollars_per_verified(MEASURED) == pytest.approx(cpu_per_verified * VCPU_HOUR_USD / 3600)
    assert dollars_per_verified(MEASURED, vcpu_hour_usd=3600.0) == pytest.approx(cpu_per_verified)
    line = next(line for line in plan_lines(MEASURED) if line.startswith("CPU per verified task"))
    assert f"{cpu_per_verified:.2f} CPU-s" in line and "per verified task" in line
