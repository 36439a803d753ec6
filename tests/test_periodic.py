"""The periodic balancer's shortcuts change nothing: the entities due and the domains where nothing runs
are found on arrays (``balance._DueTimes``), but a run is the same, to the last bit, as with the plain loop
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
    eras = ["3.10", "5.4", "5.10", "5.11", "6.1"]
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
