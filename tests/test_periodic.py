"""The periodic balancer's shortcuts change nothing: the entities due and the domains where nothing runs
are found on arrays (``balance_due.DueTimes``), but a run is the same, to the last bit, as with the plain loop
that visits every entity at every tick in order, each seeing the moves made before it."""

from __future__ import annotations

import numpy as np
from .conftest import small_scenario


def _plain_periodic(self, sim):
    """``sched_balance_domains`` as a plain loop: every (level, domain, group) at each tick, in order,
    each balanced if due (``_visit``) and seeing the moves made before it."""
    from numasim.policies.balance_pass import Pass

    now, p = sim.now, Pass(sim)
    nxt = min(self._visit(e, p.nr, p, now) for e in self.entities) if self.entities else now + self.jiffy
    self._next = max(int(nxt), now + 1)
    return p.moves


def _scenario():
    """Idle CPUs beside busy ones (domains where nothing runs), threads that block and wake, a burst of
    overcommit (tasks move), SMT, on the small machine; every load-balancer era, one with NUMA balancing."""
    import numasim

    machine = {"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "16GiB", "smt": True}
    eras = ["3.10", "5.4", "5.10", "5.11", "5.18", "6.1"]
    policies = [{"label": f"lb{e}", "policy": "cfs", "options": {"numa_imbalance_kernel": e}} for e in eras]
    policies.append({"label": "numab", "policy": "cfs", "options": {"numa_balancing": True, "scan_delay_ms": 200}})
    data = small_scenario(
        machine=machine,
        workloads={"java": {"base": "java-transactions", "touch_gbps": 8.0},
                   "stream": {"base": "stream-triad"}},
        pods=[{"name": "bw", "threads": 3, "memory": "1GiB", "profile": "stream"},
              {"name": "jvm", "replicas": 2, "threads": 10, "memory": "1GiB", "profile": "java",
               "start": "1500ms"}],
        policies=policies, duration="3s", warmup="500ms", sample_interval="100ms", replications=1)
    return numasim.from_dict(data)


def _runs(scenario) -> dict:
    from numasim.runner import _simulate

    out = {}
    for v in scenario.variants:
        sim, metrics, trace = _simulate(scenario, v, 3, None)
        out[v.label] = dict(throughput=metrics.throughput, task_moves=metrics.migrations, events=trace.n_events,
                            placements=np.asarray(trace.placements).tolist(),
                            samples={k: np.asarray(a).tolist() for k, a in trace.samples.items()})
    return out


def test_due_entities_on_arrays_give_the_plain_loops_run(monkeypatch):
    from numasim.policies import balance

    scenario = _scenario()
    fast = _runs(scenario)
    monkeypatch.setattr(balance.LoadBalancer, "_periodic", _plain_periodic)
    plain = _runs(scenario)
    for label, run in fast.items():
        assert run["task_moves"] > 0, label  # the balancer moved tasks (the slow half of the pass ran)
        for key, value in run.items():
            assert value == plain[label][key], (label, key)


class _Runqueues:
    """What ``_periodic`` reads of the runtime: run counts, queues, affinities (none pinned), the time."""

    def __init__(self, queues: list[list[int]], now: int):
        self.queues, self.now = queues, now
        self.nr_running = np.array([len(q) for q in queues], dtype=np.int64)

    def runqueue(self, cpu):
        return list(self.queues[cpu])

    def affinity(self, t):
        return None

    def allowed(self, t, cpu):
        return True


def _cfs(era: str, smt: bool, busy_factor: int):
    import numasim

    machine = {"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "16GiB", "smt": smt}
    s = numasim.from_dict(small_scenario(machine=machine, policies=[
        {"label": "x", "policy": "cfs", "options": {"numa_imbalance_kernel": era, "busy_factor": busy_factor}}]))
    v = s.variants[0]
    return v.policy(v.options, s.machine_of(v), np.random.default_rng(7))


def test_a_pass_on_random_states_is_the_plain_loops():
    """One ``_periodic`` pass against the plain loop from the same random state (entities' phases,
    intervals and failure counts; tasks per CPU): the same moves, next tick and entities' state. Covers
    every branch of the pass (nothing due, quiet and settled entities, a move and the rest of the pass
    after it) in old and new eras, with and without SMT, and with busy_factor 1 (busy interval shorter
    than the idle one)."""
    import copy

    passes_with_moves = 0
    for era in ("3.10", "5.4", "5.10", "6.1"):
        for smt in (True, False):
            for busy_factor in (16, 1):
                pol, rng = _cfs(era, smt, busy_factor), np.random.default_rng(1)
                for _ in range(60):
                    now = int(rng.integers(50, 100)) * pol.jiffy
                    for e in pol.entities:
                        pol._set_interval(e, float(len(pol._domains[e.level][e.span].cpus) * rng.choice([1, 2])))
                        e.last, e.failed = now - int(rng.integers(0, 40)) * pol.jiffy, int(rng.integers(0, 4))
                    counts = rng.choice([0, 0, 0, 1, 1, 2, 3], size=pol.machine.n_cpus).tolist()
                    queues, t = [], 0
                    for k in counts:
                        queues.append(list(range(t, t + k)))
                        t += k
                    pol._due = None
                    a, b = copy.deepcopy(pol), copy.deepcopy(pol)
                    moves = a._periodic(_Runqueues(queues, now))
                    assert moves == _plain_periodic(b, _Runqueues(copy.deepcopy(queues), now)), (era, smt, busy_factor)
                    assert a._next == b._next, (era, smt, busy_factor)
                    assert ([(e.last, e.interval_ms, e.failed) for e in a.entities]
                            == [(e.last, e.interval_ms, e.failed) for e in b.entities]), (era, smt, busy_factor)
                    passes_with_moves += bool(moves)
    assert passes_with_moves > 100  # the part after a move ran


def test_after_a_move_the_pass_sees_the_new_run_counts():
    """An idle CPU's SMT entity pulls the waiting task of its busy sibling, on a machine where every other
    CPU runs one task and no other entity is due: the CPU is then busy, so its entities are next due after
    their busy interval, not their idle one (the pass must stop using the run counts it started from)."""
    pol = _cfs("6.1", True, 16)
    m = pol.machine
    dst = 0
    sib = next(c for c in range(m.n_cpus) if c != dst and m.cpu_core[c] == m.cpu_core[dst])
    now = 100 * pol.jiffy
    for e in pol.entities:
        pol._set_interval(e, float(len(pol._domains[e.level][e.span].cpus)))
        e.last, e.failed = now, 0
    k = next(e for e in pol.entities if e.level == 0 and e.cpus == (dst,))
    k.last = 0
    queues, t = [], 0
    for c in range(m.n_cpus):
        n = 0 if c == dst else 2 if c == sib else 1
        queues.append(list(range(t, t + n)))
        t += n
    moves = pol._periodic(_Runqueues(queues, now))
    assert list(moves.values()) == [dst]
    busy = min(e.busy_ns for e in pol.entities)
    assert pol._next == now + busy  # every CPU busy after the move; with the counts from before, now + k.idle_ns
