"""Running many simulations: the order jobs start in, and results independent of the worker count."""

from __future__ import annotations

import dataclasses
import json

import numasim
from numasim.jobs import Job, run_jobs

from .conftest import small_scenario


def _echo(x):
    return x


def test_the_longest_group_goes_first_and_unseen_groups_before_it():
    order: list[tuple[str, int]] = []
    cost = {"cheap": 0.0, "dear": 0.02}

    def finished(job: Job, _out) -> list[Job]:
        order.append(job.key)
        # Each job of a group is timed as it runs; a follow-up of the same group comes back.
        if job.key[1] == 0:
            return [Job((job.group, 1), _sleep, (cost[job.group],), job.group)]
        return []

    jobs = [Job(("cheap", 0), _sleep, (cost["cheap"],), "cheap"),
            Job(("dear", 0), _sleep, (cost["dear"],), "dear"),
            Job(("cheap", 2), _sleep, (cost["cheap"],), "cheap")]
    run_jobs(jobs, 1, finished)
    # Unseen groups go in submission order; then the dearer group's follow-up overtakes the
    # cheap one's, and the cheap group's jobs go last.
    assert order[:2] == [("cheap", 0), ("dear", 0)]
    assert order[2] == ("dear", 1)
    assert sorted(order[3:]) == [("cheap", 1), ("cheap", 2)]


def _sleep(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def test_a_pool_runs_every_job_and_its_follow_ups():
    seen: dict = {}

    def finished(job: Job, out) -> list[Job]:
        seen[job.key] = out
        return [Job(job.key + ("again",), _echo, (out * 10,), job.group)] if len(job.key) == 1 else []

    run_jobs([Job((k,), _echo, (k,), f"g{k % 2}") for k in range(5)], 2, finished)
    assert seen == {**{(k,): k for k in range(5)}, **{(k, "again"): k * 10 for k in range(5)}}


def test_results_are_the_same_for_any_number_of_workers():
    data = small_scenario(duration="2s", warmup="500ms", replications=2)
    one = numasim.run(numasim.from_dict(data), workers=1)
    two = numasim.run(numasim.from_dict(data), workers=2)
    docs = [r.to_json() for r in (one, two)]
    for doc in docs:
        doc["scenario"]["provenance"].pop("created_utc")  # when it ran; everything else is the same
    assert json.dumps(docs[0], sort_keys=True) == json.dumps(docs[1], sort_keys=True)


def test_a_policy_defined_in_a_function_runs_in_worker_processes():
    # A notebook's policy cannot be imported by a worker: it is sent by value.
    from numasim import Policy

    class FirstFree(Policy):
        name = "first-free-local"

        def place(self, tid, sim):
            allowed = [c for c in range(sim.machine.n_cpus) if sim.allowed(tid, c)]
            return min(allowed, key=lambda c: (sim.nr_running[c], c))

    scenario = numasim.from_dict(small_scenario(duration="1500ms", warmup="500ms",
                                                policies=[{"label": "cfs", "policy": "cfs"}]))
    base = scenario.variants[0]
    mine = dataclasses.replace(base, label="mine", policy=FirstFree, options=FirstFree.Options())
    scenario = dataclasses.replace(scenario, variants=(base, mine))
    res = numasim.run(scenario, workers=2, with_sla=False)
    assert res.run("mine").throughput > 0


def test_a_worker_that_dies_is_reported_with_its_variant_and_seed():
    import os

    import pytest

    from numasim import Policy
    from numasim.errors import NumasimError

    class Dies(Policy):
        name = "dies"

        def place(self, tid, sim):
            os._exit(3)  # a crash no Python code can catch (a segfault in a C extension, the OOM killer)

    scenario = numasim.from_dict(small_scenario(duration="1500ms", warmup="500ms",
                                                policies=[{"label": "cfs", "policy": "cfs"}]))
    dies = dataclasses.replace(scenario.variants[0], label="dies", policy=Dies, options=Dies.Options())
    scenario = dataclasses.replace(scenario, variants=(scenario.variants[0], dies))
    with pytest.raises(NumasimError, match=r"worker process died .* simulating .*variant dies, seed \d+"):
        numasim.run(scenario, workers=2, with_sla=False)
    # The pool is usable again afterwards.
    assert numasim.run(dataclasses.replace(scenario, variants=scenario.variants[:1]), workers=2).runs


def test_progress_prints_a_line_per_finished_variant_when_not_a_terminal(capsys):
    data = small_scenario(duration="1500ms", warmup="500ms", replications=2,
                          policies=[{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"}])
    numasim.run(numasim.from_dict(data), workers=1)
    lines = capsys.readouterr().err.splitlines()
    # The order depends on which variant the scheduler expects to take longer.
    assert sorted(line.split(" (")[0] for line in lines) == ["finished cfs", "finished numactl"]
    assert " (4/4 simulations" in lines[-1]
    numasim.run(numasim.from_dict(data), workers=1, quiet=True)
    assert capsys.readouterr().err == ""


def test_the_live_progress_names_the_running_variants_and_counts():
    import io

    from rich.console import Console

    from numasim.progress import RunProgress

    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with RunProgress("demo", {"a": 2, "b": 1}, console=console) as p:
        p.started("a")
        p.started("b")
        assert p._description() == "demo: a, b"
        p.finished("a")
        p.finished("b")
        assert (p.done, p.left["a"], p.left["b"]) == (2, 1, 0)
        assert p._description() == "demo"
