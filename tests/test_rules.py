"""The compiled rules a policy hands the runtime: the idle pull and the wake-up placement.

The idle pull (``Policy.idle_rule``, ``numasim.sim.idle_pull.pull_one``) is Linux's newidle
balancing at a lowest domain of one-CPU groups: from the first busiest CPU of the idle
CPU's domain, if it has two threads or more, one queued thread other than the running
one, among those allowed on the idle CPU, moves; checked on hand-made runqueues. The
wake-up rule (``Policy.wake_rule``, CFS's select_task_rq_fair) must place as the policy's
``wake()`` does; tables that point outside the machine are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from numasim import Policy, PolicyError, register
from numasim.policies.api import PULL_MAX_QUEUE, WakeAffine
from numasim.sim import idle_pull, layout


def _state(queues: list[list[int]], span: list[int], masks: list[list[bool]], mask_of: list[int]):
    """The arrays pull_one reads: runqueues (linked lists, in the order given), domains, masks."""
    ncpu, nt = len(queues), len(mask_of)
    I = np.zeros((len(layout.THREAD_FIELDS[1]), nt), dtype=np.int64)
    CI = np.zeros((len(layout.CPU_FIELDS[1]), ncpu), dtype=np.int64)
    CI[layout.CI_HEAD] = -1
    I[layout.I_NEXT] = -1
    for cpu, q in enumerate(queues):
        CI[layout.CI_NR, cpu] = len(q)
        if q:
            CI[layout.CI_HEAD, cpu] = q[0]
        for a, b in zip(q, q[1:]):
            I[layout.I_NEXT, a] = b
    CI[layout.CI_PULL_SPAN] = span
    I[layout.I_MASK] = mask_of
    A = np.array(masks, dtype=np.bool_).reshape(len(masks), ncpu)
    sc = layout.Scratch(nt, ncpu, False, 0.0, 1.0, 1.0)
    sc.ctl[layout.PULL_RULE] = 1
    sc.ctl[layout.PULL_AT] = 0
    return I, CI, A, sc


@st.composite
def _machines(draw):
    ncpu = draw(st.integers(2, 6))
    span = draw(st.lists(st.integers(0, 1), min_size=ncpu, max_size=ncpu))
    sizes = draw(st.lists(st.integers(0, 4), min_size=ncpu, max_size=ncpu))
    nt = sum(sizes)
    order = draw(st.permutations(range(nt)))
    queues, k = [], 0
    for n in sizes:
        queues.append(list(order[k:k + n]))
        k += n
    nmask = draw(st.integers(1, 3))
    masks = [[True] * ncpu] + [draw(st.lists(st.booleans(), min_size=ncpu, max_size=ncpu)) for _ in range(nmask - 1)]
    mask_of = draw(st.lists(st.integers(0, nmask - 1), min_size=nt, max_size=nt))
    cpu = draw(st.integers(0, ncpu - 1))
    u = draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=2 * ncpu, max_size=2 * ncpu))
    return queues, span, masks, mask_of, cpu, u


@settings(max_examples=300, deadline=None)
@given(_machines())
def test_the_pull_takes_an_allowed_waiting_thread_of_the_busiest_cpu_of_the_domain_that_has_one(case):
    # The busiest CPU of the domain (of equals, the first from the idle CPU on, wrapping: its group
    # ring) with two threads or more: one of them runs
    # (drawn), another that may run on the idle CPU moves (drawn); if none may, the next busiest.
    # With more than PULL_MAX_QUEUE threads on a CPU of the domain, nothing (the policy balances it).
    queues, span, masks, mask_of, cpu, u = case
    I, CI, A, sc = _state(queues, span, masks, mask_of)
    sc.draws[layout.DRAW_PULL, :len(u)] = u
    got = idle_pull.pull_one(I, CI, A, sc.draws, sc.ctl, cpu)
    mine = [c for c in range(len(queues)) if span[c] == span[cpu] and len(queues[c]) >= 2]
    want, used = -1, 0
    if any(len(queues[c]) > PULL_MAX_QUEUE for c in mine):
        mine = []  # the kernel may move several: left to the policy's idle(), no draws used
    for src in sorted(mine, key=lambda c: (-len(queues[c]), (c - cpu) % len(queues))):
        q = queues[src]
        running = q[int(u[used] * len(q))]
        movable = [t for t in q if t != running and masks[mask_of[t]][cpu]]
        used += 2
        if movable:
            want = movable[int(u[used - 1] * len(movable))]
            break
    assert (got, sc.ctl[layout.PULL_AT]) == (want, used)


@settings(max_examples=300, deadline=None)
@given(_machines())
def test_pullable_names_the_cpus_with_two_threads_one_of_which_may_run_on_the_idle_cpu(case):
    # View.pullable, which CFS's newidle balancing asks before it looks at any domain.
    queues, span, masks, mask_of, cpu, _u = case
    I, CI, A, _sc = _state(queues, span, masks, mask_of)
    out = np.full(len(queues), -7, dtype=np.int64)
    k = idle_pull.pullable(I, CI, A, cpu, out)
    assert out[:k].tolist() == [c for c, q in enumerate(queues) if len(q) >= 2 and any(masks[mask_of[t]][cpu] for t in q)]


def test_every_waiting_allowed_thread_is_pulled_as_often():
    # CPU 0 idle; CPU 1 runs 3 threads, thread 1 may not run on CPU 0; CPU 2 two.
    queues = [[], [0, 1, 2], [3, 4]]
    masks = [[True, True, True], [False, True, True]]
    I, CI, A, sc = _state(queues, [0, 0, 0], masks, [0, 1, 0, 0, 0])
    counts = np.zeros(5)
    grid = (np.arange(40) + 0.5) / 40
    for u1 in grid:
        for u2 in grid:
            sc.draws[layout.DRAW_PULL, :2] = (u1, u2)
            sc.ctl[layout.PULL_AT] = 0
            counts[idle_pull.pull_one(I, CI, A, sc.draws, sc.ctl, 0)] += 1
    assert counts[1] == 0 and counts[3] == 0 and counts[4] == 0  # pinned elsewhere; not the busiest CPU
    share = counts[[0, 2]] / counts.sum()
    assert np.allclose(share, 0.5, atol=0.02), share


def test_no_pull_where_the_kernel_may_move_several_threads():
    # 4 threads on CPU 1: newidle's imbalance is 2 there; the policy's idle() balances the domain.
    I, CI, A, sc = _state([[], [0, 1, 2, 3], [4, 5]], [0, 0, 0], [[True] * 3], [0] * 6)
    assert idle_pull.pull_one(I, CI, A, sc.draws, sc.ctl, 0) == -1 and sc.ctl[layout.PULL_AT] == 0


def test_no_pull_without_the_rule_nor_from_a_cpu_with_one_thread_and_draws_asked_for_when_used_up():
    I, CI, A, sc = _state([[], [0], [1, 2]], [0, 0, 1], [[True] * 3], [0, 0, 0])
    assert idle_pull.pull_one(I, CI, A, sc.draws, sc.ctl, 0) == -1  # CPU 2 is in another domain
    I, CI, A, sc = _state([[], [0, 1]], [0, 0], [[True] * 2], [0, 0])
    sc.ctl[layout.PULL_AT] = layout.DRAWS - 1
    assert idle_pull.pull_one(I, CI, A, sc.draws, sc.ctl, 0) == idle_pull.NO_DRAWS
    sc.ctl[layout.PULL_RULE] = 0
    assert idle_pull.pull_one(I, CI, A, sc.draws, sc.ctl, 0) == -1


def _runs(data):
    from .conftest import run_small

    res = run_small(data, workers=1, with_sla=False, quiet=True)
    return {r.label: (r.throughput, r.migrations, r.cross_node_migrations, [p.throughput for p in r.pods])
            for r in res.runs}


@pytest.mark.parametrize("smt", [False, True])
def test_the_compiled_wake_up_rules_place_as_the_policys_wake_does(monkeypatch, smt):
    # The runtime runs CFS's select_task_rq_fair (WakeAffine) and ESXi's least-loaded placement
    # (LeastLoaded) compiled (Policy.wake_rule); without the rules it asks the policy's wake() at
    # every wake-up. Pinned (numactl, taskset, ESXi's home nodes) and free threads, SMT or not.
    from numasim.policies.cfs import CFS
    from numasim.policies.esxi import ESXi

    from .conftest import OVERCOMMITTED, small_scenario

    data = small_scenario(**{**OVERCOMMITTED, "duration": "4s", "warmup": "1s",
                             "policies": [{"label": "cfs", "policy": "cfs"}, {"label": "numactl", "policy": "numactl"},
                                          {"label": "taskset", "policy": "taskset", "options": {"cpus": ["0-2", "1-5"]}},
                                          {"label": "esxi", "policy": "esxi"}]})
    data["machine"]["smt"] = smt
    compiled = _runs(data)
    monkeypatch.setattr(CFS, "wake_rule", lambda self: None)
    monkeypatch.setattr(ESXi, "wake_rule", lambda self: None)
    assert _runs(data) == compiled


@register
class _BadWakeRule(Policy):
    """A policy whose wake-up rule's tables point outside the machine."""

    name = "test-bad-wake-rule"

    def place(self, tid, sim):
        return 0

    def wake_rule(self):
        from numasim.policies.cfs import CFS, CFSOptions
        from numasim.policies.rules import _sections

        tables = CFS(CFSOptions(), self.machine, np.random.default_rng(0)).wake_rule().tables.copy()
        tables[_sections(*tables[:8])[3]] = 99  # the first CPU's LLC: beyond the machine's
        return WakeAffine(tables)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_least_loaded_rule_takes_the_allowed_cpu_with_the_fewest_threads_then_the_quietest_core(data):
    from numasim.policies.rules import least_loaded

    ways = data.draw(st.sampled_from([1, 2, 4]))
    ncores = data.draw(st.integers(1, 4))
    ncpu = ways * ncores
    nr = np.array(data.draw(st.lists(st.integers(0, 3), min_size=ncpu, max_size=ncpu)), dtype=np.int64)
    allowed = np.array(data.draw(st.lists(st.booleans(), min_size=ncpu, max_size=ncpu)))
    core_cpus = np.array([[(c // ways) * ways + k for k in range(ways)] + [-1] for c in range(ncpu)], dtype=np.int64)
    smt = ways > 1
    got = least_loaded(nr, allowed, core_cpus, smt)
    cands = [c for c in range(ncpu) if allowed[c]]
    rest = [sum(int(nr[s]) for s in core_cpus[c] if s >= 0 and s != c) if smt else 0 for c in range(ncpu)]
    assert got == (min(cands, key=lambda c: (nr[c], rest[c], c)) if cands else -1)


def test_wake_rule_tables_outside_the_machine_are_refused_with_a_policy_error():
    from .conftest import run_small, small_scenario

    with pytest.raises(PolicyError, match=r"test-bad-wake-rule.*WakeAffine.tables must be"):
        run_small(small_scenario(policies=[{"label": "bad", "policy": "test-bad-wake-rule"}]), workers=1)


def test_tables_whose_llcs_reach_beyond_their_cpus_or_the_array_are_refused():
    # A review found tables that passed the check and made the compiled rule read outside them
    # (their LLCs' lengths and CPUs went unchecked); and tables of another size than their header says.
    from numasim.model.presets import machine_preset
    from numasim.policies.cfs import CFS, CFSOptions
    from numasim.policies.rules import _sections, check_packed

    m = machine_preset("skylake-8180-4s")
    W = CFS(CFSOptions(), m, np.random.default_rng(0)).wake_rule().tables
    assert check_packed(W, m.n_cpus) is None
    at = _sections(*W[:8])
    for section, value in ((5, 10**12), (6, m.n_cpus), (7, -1)):  # an LLC's length, its start, one of its CPUs
        bad = W.copy()
        bad[at[section]] = value
        assert check_packed(bad, m.n_cpus) is not None
    assert check_packed(W[:-1], m.n_cpus) is not None
    assert check_packed(W.reshape(1, -1), m.n_cpus) is not None


def test_tables_whose_numa_rows_name_a_node_outside_the_distances_are_refused():
    # At a NUMA level the wake rule reads the distance between the two CPUs' nodes: a node number
    # outside the distance rows would read outside the array.
    from numasim.model.presets import machine_preset
    from numasim.policies.cfs import CFS, CFSOptions
    from numasim.policies.rules import check_packed

    m = machine_preset("skylake-8180-4s")
    W = CFS(CFSOptions(), m, np.random.default_rng(0)).wake_rule().tables
    assert check_packed(W, m.n_cpus) is None
    from numasim.policies.rules import _sections

    at = _sections(*W[:8])
    levels = int(W[0])
    numa = [li for li in range(levels) if W[at[1] + li] > 0]
    assert numa  # the 4 sockets meet at NUMA levels that wake affine
    W[at[2] + numa[0] * m.n_cpus + 5] = int(W[5])  # CPU 5's node there: one past the last node
    assert check_packed(W, m.n_cpus) is not None


def test_a_cfs_subclass_with_its_own_idle_gets_no_compiled_pull_and_is_always_asked():
    from numasim.model.presets import machine_preset
    from numasim.policies.cfs import CFS, CFSOptions

    class MyIdle(CFS):
        name = "test-my-idle"

        def idle(self, cpu, sim):
            return []

    machine = machine_preset("pacific-broadwell")
    mine, plain = MyIdle(CFSOptions(), machine, np.random.default_rng(0)), CFS(CFSOptions(), machine, np.random.default_rng(0))
    assert plain.idle_rule() is not None and plain.idle_when == "overloaded"
    assert mine.idle_rule() is None and mine.idle_when == "always"


def test_a_machine_with_many_wake_affine_levels_packs_them_all():
    # A line of 12 nodes at distances 20-30 has 11 NUMA levels, all within node_reclaim_distance (30), above
    # the LLC's: the packed tables hold all 12 (they once stopped at 8 with an uncaught error).
    from numasim.model.presets import load_preset
    from numasim.model.machine import Machine, MachineSpec
    from numasim.policies.cfs import CFS, CFSOptions
    from numasim.policies.rules import check_packed

    data = load_preset("machines", "skylake-8180-4s")
    for k in ("sources", "links", "latency_ns", "remote_latency_ns"):
        data.pop(k, None)
    data.update(sockets=12, cores_per_node=2, smt=False, slit=[[10 + abs(i - j) + 9 * (i != j) for j in range(12)]
                                                              for i in range(12)])
    m = Machine.from_spec(MachineSpec(**data))
    W = CFS(CFSOptions(), m, np.random.default_rng(0)).wake_rule().tables
    assert check_packed(W, m.n_cpus) is None
    assert int(W[0]) == 12
