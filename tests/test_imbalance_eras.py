"""The NUMA imbalance CFS tolerates, by kernel era, and the kernel's reclaim distance.

fair.c 5.6-5.10 (57abff067a08, b396f52326de): a fork stays on its node while the node has an idle CPU;
the periodic balancer leaves any imbalance while the busiest group runs at most 2 tasks.
fair.c 5.11-5.17 (23e6082a522e, 7d2b5dd0bcc4): a fork stays on its node while the node runs fewer tasks
than a quarter of the domain's CPUs; the periodic balancer halves the difference and leaves up to
NUMA_IMBALANCE_MIN (2) tasks while the busiest group runs fewer than a quarter of its CPUs. 5.15.33 on
(2cfb7a1b031b backported): the same against a quarter of the local group's CPUs, counting the task that
would move. 5.18-5.19 (e496132ebedd): imb_numa_nr, one task per LLC of a node (a quarter of a one-LLC
node); a fork stays local while the node would run at most that many, whatever CPUs the task may use.
6.0 on: 1/8 of a one-LLC node, the idle CPUs within 2 at fork, at most the CPUs the task may use there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from numasim.model.machine import Machine, MachineSpec
from numasim.model.presets import load_preset
from numasim.policies.balance_pass import StatsMemo
from numasim.policies.cfs import CFS, CFSOptions
from numasim.policies.domains import build_levels


def _machine(name: str, **over: Any) -> Machine:
    return Machine.from_spec(MachineSpec(**{**load_preset("machines", name), **over}))


ZEN3 = _machine("epyc-7742-nps1", cores_per_llc=8)  # 2 x 64 cores, SMT, 8 LLCs of 8 cores per node


def _fork(machine: Machine, era: str, n: int) -> np.ndarray:
    """Fork ``n`` always-runnable threads from CPU 0 and return the threads per CPU."""
    cfs = CFS(CFSOptions(numa_imbalance_kernel=era), machine, np.random.default_rng(0))
    nr = np.zeros(machine.n_cpus, dtype=int)
    for _ in range(n):
        nr[cfs.find_dst_cpu(0, nr, None)] += 1
    return nr


def _per(nr: np.ndarray, label: np.ndarray) -> list[int]:
    return np.bincount(label, weights=nr, minlength=int(label.max()) + 1).astype(int).tolist()


@pytest.mark.parametrize("era", ["5.11", "5.15"])
def test_zen3_stream_threads_stack_on_one_socket_under_5x_and_spread_under_6_1(era):
    # Mel Gorman's case: 16 STREAM threads on 2 x 64-core Zen 3 (8 LLCs per node).
    old, new = _fork(ZEN3, era, 16), _fork(ZEN3, "6.1", 16)
    assert _per(old, ZEN3.cpu_node) == [16, 0]  # 16 < 256 / 4 (5.11), 17 < 128 / 4 (5.15): the forks stay local
    assert _per(new, ZEN3.cpu_node) == [8, 8]  # imb_numa_nr = 8 LLCs
    assert max(_per(new, ZEN3.cpu_llc)) == 1  # one thread per LLC
    assert max(_per(old, ZEN3.cpu_llc)) == 2
    assert old.max() == new.max() == 1  # an idle CPU each, in both


def test_zen3_5_18_keeps_one_llc_per_fork_and_sends_the_ninth_away():
    # imb_numa_nr = 8 LLCs: the first 8 forks stay local (8 <= 8), the next 8 go to the idler node.
    nr = _fork(ZEN3, "5.18", 16)
    assert _per(nr, ZEN3.cpu_node) == [8, 8]
    assert max(_per(nr, ZEN3.cpu_llc)) == 1
    assert _per(_fork(ZEN3, "5.18", 9), ZEN3.cpu_node) == [8, 1]


def _fork_from(machine: Machine, era: str, n: int, cpu: int, allowed: frozenset[int],
               order: list[int] | None = None) -> np.ndarray:
    cfs = CFS(CFSOptions(numa_imbalance_kernel=era), machine, np.random.default_rng(0))
    nr = np.zeros(machine.n_cpus, dtype=int)
    nr[cpu] = 1  # the parent
    for _ in range(n - 1):
        dst = cfs.find_dst_cpu(cpu, nr, allowed)
        nr[dst] += 1
        if order is not None:
            order.append(int(dst))
    return nr


def test_zen3_pinned_stream_piles_on_one_socket_under_5_18_only():
    # K Prateek Nayak's case (f5b2eeb49991): numactl -C 0,16,32,48,64,80,96,112 ./stream8 on 2 x 64-core
    # Zen 3, started on CPU 16. 5.18 counts the node's 8 LLCs, not the 4 CPUs the threads may use there, so
    # all 8 stay on socket 0; 6.0+ caps the allowance at those 4 CPUs: one thread per CPU. The commit's
    # sched_wakeup_new trace of 5.18-rc1: target_cpu 032, 048, 000, then 016 four times (the parent's CPU).
    allowed = frozenset(range(0, 128, 16))
    assert all(ZEN3.cpu_node[c] == (c >= 64) for c in allowed)
    order: list[int] = []
    old, new = _fork_from(ZEN3, "5.18", 8, 16, allowed, order), _fork_from(ZEN3, "6.1", 8, 16, allowed)
    assert {int(c): int(old[c]) for c in np.flatnonzero(old)} == {0: 1, 16: 5, 32: 1, 48: 1}
    # and in the trace's order: the LLC groups are met from CPU 16's own on, wrapping (domains.Level.order)
    assert order == [32, 48, 0, 16, 16, 16, 16]
    assert _per(new, ZEN3.cpu_node) == [4, 4] and new.max() == 1
    assert set(np.flatnonzero(old)) | set(np.flatnonzero(new)) <= allowed


def test_zen3_32_threads_the_lts_rule_sends_the_last_fork_away():
    # 5.15.33+: the 32nd task would make the node run a quarter of its 128 CPUs; 5.11 counts the domain's 256.
    assert _per(_fork(ZEN3, "5.15", 32), ZEN3.cpu_node) == [31, 1]
    assert _per(_fork(ZEN3, "5.11", 32), ZEN3.cpu_node) == [32, 0]


def test_one_llc_node_local_forks_by_era():
    m = _machine("skylake-8180")  # 2 x 28 cores, SMT: 112 CPUs, 56 per node, one LLC per node
    w = m.n_cpus
    old = _fork(m, "5.11", w // 4)
    assert _per(old, m.cpu_node) == [w // 4, 0]
    # One more and the local node holds a quarter of the domain: the fork goes to the idler node.
    assert _per(_fork(m, "5.11", w // 4 + 1), m.cpu_node) == [w // 4, 1]
    # 5.15.33+: a quarter of the node (14), counting the new task: 13 stay, then the forks go to the idler node.
    assert _per(_fork(m, "5.15", 16), m.cpu_node) == [13, 3]
    new = _per(_fork(m, "6.1", w // 4), m.cpu_node)
    assert abs(new[0] - new[1]) <= 2  # 6.0+: imb_numa_nr = 56 >> 3 = 7, then even
    # 5.18-5.19: a quarter of the one-LLC node (14), counting the new task: 14 stay, then the idler node.
    assert _per(_fork(m, "5.18", 16), m.cpu_node) == [14, 2]
    assert [lv.imb_numa_nr for lv in build_levels(m, CFSOptions(numa_imbalance_kernel="5.18").model_dump())
            if lv.numa] == [[14]]
    assert [lv.imb_numa_nr for lv in build_levels(m, CFSOptions().model_dump()) if lv.numa] == [[7]]


def test_5_10_forks_fill_the_local_node_while_it_has_an_idle_cpu():
    m = _machine("skylake-8180")  # 56 CPUs per node
    node = m.n_cpus // 2
    assert _per(_fork(m, "5.10", node), m.cpu_node) == [node, 0]
    assert _per(_fork(m, "5.10", node + 1), m.cpu_node) == [node, 1]  # a full node is no longer "has spare"
    assert _fork(m, "5.10", node).max() == 1  # one thread per CPU, never two while one is idle
    assert _per(_fork(ZEN3, "5.10", 64), ZEN3.cpu_node) == [64, 0]  # 5.11 would have sent the 65th of 256/4 away


def _periodic_moves(era: str, busy: int) -> int:
    """Tasks the periodic balancer moves between the two nodes of a 2 x 28-core Skylake-SP (SMT) when one
    node runs ``busy`` tasks and the other none."""
    m = _machine("skylake-8180")
    cfs = CFS(CFSOptions(numa_imbalance_kernel=era), m, np.random.default_rng(0))
    lvl = next(lv for lv in cfs.levels if lv.numa)
    half = m.n_cpus // 2
    memo = StatsMemo(lvl.pct)
    busiest = memo[(half, half // 2, busy, busy, half - busy)]
    local = memo[(half, half // 2, 0, 0, half)]
    return cfs._imbalance(lvl, 0, False, local, busiest, 0.0)[1]


@pytest.mark.parametrize("era, moved", [("5.10", 2), ("5.11", 0), ("5.15", 0), ("5.18", 0), ("6.1", 2)])
def test_periodic_balancer_tolerates_two_tasks_under_5x_only(era, moved):
    # Four tasks on node 0, none on node 1: 5.x halves the difference (2) and tolerates it while node 0
    # (5.11), or node 1 after the move (5.15), runs fewer than a quarter of its CPUs, or node 1 after the
    # move runs at most imb_numa_nr (5.18: 14); 6.1 compares the difference (4) before halving.
    assert _periodic_moves(era, 4) == moved


@pytest.mark.parametrize("era", ["5.10", "5.11", "5.15", "5.18"])
def test_without_prefer_sibling_the_5x_eras_halve_the_idle_cpu_difference(era):
    # A NUMA level above another (no SD_PREFER_SIBLING): the idle-CPU difference, halved, is what moves.
    # 56-CPU groups, busiest with 6 busy CPUs (50 idle) against none: (56 - 50) >> 1 = 3, more than
    # NUMA_IMBALANCE_MIN; then 5.18 tolerates it only if at most 2, so 3 moves under every era; with 5
    # busy (51 idle), (56 - 51) >> 1 = 2: tolerated by 5.18 (1 <= 14) and 5.11/5.15 (< 56 / 4), not by 5.10.
    from numasim.policies.imbalance import periodic_numa_imbalance

    memo = StatsMemo(117)
    local = memo[(56, 28, 0, 0, 56)]
    six, five = memo[(56, 28, 6, 6, 50)], memo[(56, 28, 5, 5, 51)]
    assert periodic_numa_imbalance(era, False, local, six, 2, 14) == 3
    assert periodic_numa_imbalance(era, False, local, five, 2, 14) == (2 if era == "5.10" else 0)
    # With prefer_sibling the task difference is halved instead: 6 tasks -> 3, 5 -> 2.
    assert periodic_numa_imbalance(era, True, local, five, 2, 14) == (2 if era == "5.10" else 0)


def test_5_18_halves_before_its_test_6_1_after():
    # Six tasks against none: 5.18 halves to 3, more than NUMA_IMBALANCE_MIN: 3 move; 6.1 the same 3.
    # Five: 5.18 halves to 2 and tolerates it; 6.1 sees 5 and moves 2.
    assert (_periodic_moves("5.18", 6), _periodic_moves("6.1", 6)) == (3, 3)
    assert (_periodic_moves("5.18", 5), _periodic_moves("6.1", 5)) == (0, 2)


@pytest.mark.parametrize("era, moved", [("5.10", 1), ("5.11", 0), ("6.1", 1)])
def test_5_10_tolerates_an_imbalance_only_while_the_busiest_node_runs_two_tasks(era, moved):
    # Three tasks against none: 5.10 halves (1) and keeps it, the busiest group running more than 2;
    # 5.11 tolerates it (3 < 56 / 4); 6.1 tolerates an idle-CPU difference of at most 2, so 3 is halved to 1.
    # Two against none: every era leaves them.
    assert _periodic_moves(era, 3) == moved
    assert _periodic_moves(era, 2) == 0


def test_zen_reclaim_distance_keeps_fork_balancing_across_a_slit_of_32():
    genoa = _machine("epyc-9654-nps1")  # SLIT 10/32, node_reclaim_distance 32 (arch/x86 amd.c)
    top = build_levels(genoa, CFSOptions().model_dump())[-1]
    assert top.numa and top.fork and top.wake_affine
    intel_like = _machine("epyc-9654-nps1", node_reclaim_distance=30)
    top = build_levels(intel_like, CFSOptions().model_dump())[-1]
    assert not top.fork and not top.wake_affine
    # The policy's option, when given, wins over the machine's.
    top = build_levels(genoa, CFSOptions(node_reclaim_distance=30).model_dump())[-1]
    assert not top.fork


def test_numa_balancing_load_check_follows_the_era():
    # task_numa_find_cpu's adjust_numa_imbalance, an imbalance of 2 tasks: tolerated by the 5.x eras while the
    # destination node would run fewer than a quarter of its 56 CPUs (14), by 6.1 up to imb_numa_nr (56 >> 3).
    m = _machine("skylake-8180")
    node = m.n_cpus // 2
    for era, last_tolerated in (("5.11", node // 4 - 1), ("5.15", node // 4 - 1), ("5.18", node >> 2),
                                ("6.1", node >> 3)):
        cfs = CFS(CFSOptions(numa_imbalance_kernel=era, numa_balancing=True), m, np.random.default_rng(0))
        assert cfs.numab is not None
        assert cfs.numab._adjust(2, last_tolerated, node, 0) == 0, era
        assert cfs.numab._adjust(2, last_tolerated + 1, node, 0) == 2, era
        assert cfs.numab._adjust(3, 1, node, 0) == 3, era  # more than NUMA_IMBALANCE_MIN: never tolerated
    # 5.10 (fb86f5b21192 with the destination's count): any imbalance while the destination runs at most 2.
    cfs = CFS(CFSOptions(numa_imbalance_kernel="5.10", numa_balancing=True), m, np.random.default_rng(0))
    assert cfs.numab is not None
    assert cfs.numab._adjust(5, 2, node, 0) == 0
    assert cfs.numab._adjust(2, 3, node, 0) == 2


def test_a_number_5_10_reads_as_the_5_10_era():
    # YAML and --set read 5.10 as the float 5.1, which is no era.
    assert CFSOptions(numa_imbalance_kernel=5.10).numa_imbalance_kernel == "5.10"
    assert CFSOptions(numa_imbalance_kernel=5.11).numa_imbalance_kernel == "5.11"


def _era_runs(machine: dict, numab: bool, threads: int = 4, profile: str = "java") -> dict[str, tuple[float, float]]:
    from numasim import from_dict, run

    from .conftest import small_scenario

    eras = ["5.10", "5.11", "5.15", "5.18", "6.1"]
    data = small_scenario(
        machine={"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "16GiB", **machine},
        workloads={"java": {"base": "java-transactions", "touch_gbps": 8.0}, "stencil": {"base": "hpc-stencil"}},
        pods=[{"name": "app", "replicas": 1, "threads": threads, "memory": "2GiB", "profile": profile}],
        policies=[{"label": e, "policy": "cfs", "options": {"numa_imbalance_kernel": e, "numa_balancing": numab}}
                  for e in eras])
    res = run(from_dict(data), workers=1)
    return {e: (res.run(e).throughput, res.run(e).locality) for e in eras}


@pytest.mark.parametrize("numab", [False, True])
def test_one_node_every_era_gives_the_same_run(numab):
    # The eras differ only at NUMA levels: a one-socket, one-node machine has none.
    runs = _era_runs({"sockets": 1, "slit": None}, numab)
    assert len(set(runs.values())) == 1, runs
    assert next(iter(runs.values()))[1] == 1.0


def test_two_nodes_the_eras_place_a_forking_process_differently():
    # A stencil whose main thread touches the whole grid forks a second worker on 2 x 4 cores: 5.10 keeps it
    # on the parent's node (an idle CPU there) and leaves the pair (the busiest node runs 2); 6.1 keeps one
    # task local (imb_numa_nr of a 4-CPU node) and sends the second to the idler node, away from the grid.
    runs = _era_runs({}, False, threads=2, profile="stencil")
    assert runs["5.10"][1] == 1.0, runs
    assert runs["6.1"][1] < 0.75, runs


# ---------------------------------------------------------------- before the v5.5 rework
# fair.c up to v4.10 (find_idlest_group: the least loaded group unless 100 * this_load < (100 +
# (imbalance_pct - 100) / 2) * min_load) and v4.17-v5.4 (runnable loads, "consider staying local"
# across SD_NUMA by imbalance_pct - 100 per cent of one task); find_busiest_group and
# calculate_imbalance / fix_small_imbalance as in v4.19. Those kernels had imbalance_pct 125 at NUMA levels.

def _old(machine: Machine, era: str) -> CFS:
    return CFS(CFSOptions(numa_imbalance_kernel=era, imbalance_pct_numa=125, busy_factor=32), machine,
               np.random.default_rng(0))


def _fork_old(machine: Machine, era: str, n: int) -> np.ndarray:
    cfs = _old(machine, era)
    nr = np.zeros(machine.n_cpus, dtype=int)
    for _ in range(n):
        nr[cfs.find_dst_cpu(0, nr, None)] += 1
    return nr


def test_3_10_forks_alternate_between_the_nodes():
    m = _machine("skylake-8180")  # 56 CPUs per node
    # A fork goes to the idler node unless its own is under 112 % of that node's load (imbalance_pct 125):
    # few tasks alternate; with more, the local node keeps up to 12 % more (29 against 27 is under 112 %:
    # the 57th fork stays local).
    for n in (1, 2, 7, 16):
        per = _per(_fork_old(m, "3.10", n), m.cpu_node)
        assert abs(per[0] - per[1]) <= 1, (n, per)
    assert _per(_fork_old(m, "3.10", 57), m.cpu_node) == [30, 27]


def test_5_4_forks_stay_local_up_to_a_quarter_task_per_cpu():
    m = _machine("skylake-8180")  # 56 CPUs per node: 1024 * 14 / 56 = 256 = 1024 * (125 - 100) / 100
    # The 15th fork still finds its node's load per CPU within 256 of the empty node's; the 16th does not.
    assert _per(_fork_old(m, "5.4", 15), m.cpu_node) == [15, 0]
    assert _per(_fork_old(m, "5.4", 16), m.cpu_node) == [15, 1]
    assert _fork_old(m, "5.4", 15).max() == 1  # an idle CPU each within the node


def _stats(memo: StatsMemo, cpus: int, cores: int, tasks: int):
    busy = min(tasks, cpus)
    return memo[(cpus, cores, tasks, busy, cpus - busy)]


def test_old_balancer_evens_out_four_tasks_from_an_idle_cpu():
    from numasim.policies.balance_v4 import CPU_IDLE, find_busiest_group

    memo = StatsMemo(125)
    local, busiest = _stats(memo, 56, 28, 0), _stats(memo, 56, 28, 4)
    # sds avg_load 4 * 1024 / 112 = 36; the busiest 73: the load to move is 36 x 56 = 2016, two tasks
    # (a task moves while half its load fits what is left).
    assert find_busiest_group([local, busiest], (0, 1), 125, CPU_IDLE, False, False) == (1, 2016)


@pytest.mark.parametrize("busy, expected", [(2, (1, 1024)), (1, None)])
def test_old_balancer_splits_a_pair_that_5_10_tolerates(busy, expected):
    # Two tasks against none, from an idle CPU: 56 idle CPUs against 54 is more than one apart, so the
    # old balancer moves one (fix_small_imbalance: one task's load); 5.6-5.10 leave the pair. One task
    # against none is balanced (56 <= 55 + 1).
    from numasim.policies.balance_v4 import CPU_IDLE, find_busiest_group

    memo = StatsMemo(125)
    stats = [_stats(memo, 56, 28, 0), _stats(memo, 56, 28, busy)]
    assert find_busiest_group(stats, tuple(range(len(stats))), 125, CPU_IDLE, False, False) == expected
    assert _periodic_moves("5.10", 2) == 0


def test_old_balancer_overloaded_nodes_meet_at_the_average():
    # Pacific's shape: 48 and 32 tasks on two 22-CPU nodes, from a busy CPU. 100 x 2234 > 125 x 1489, so
    # not balanced; the load to move is (1861 - 1489) x 22 = 8184: eight tasks, 40 and 40.
    from numasim.policies.balance_v4 import CPU_NOT_IDLE, find_busiest_group

    memo = StatsMemo(125)
    stats = [_stats(memo, 22, 22, 32), _stats(memo, 22, 22, 48)]
    assert find_busiest_group(stats, tuple(range(len(stats))), 125, CPU_NOT_IDLE, False, True) == (1, 8184)
    # 40 against 44 tasks: 100 x 2048 <= 125 x 1861, within imbalance_pct: balanced.
    stats = [_stats(memo, 22, 22, 40), _stats(memo, 22, 22, 44)]
    assert find_busiest_group(stats, tuple(range(len(stats))), 125, CPU_NOT_IDLE, False, True) is None


def test_old_eras_read_as_numbers_and_tolerate_no_numa_imbalance():
    assert CFSOptions(numa_imbalance_kernel=3.10).numa_imbalance_kernel == "3.10"
    assert CFSOptions(numa_imbalance_kernel=5.4).numa_imbalance_kernel == "5.4"
    m = _machine("skylake-8180")
    for era in ("3.10", "5.4"):
        cfs = CFS(CFSOptions(numa_imbalance_kernel=era, numa_balancing=True), m, np.random.default_rng(0))
        assert cfs.numab is not None
        assert cfs.numab._adjust(1, 1, m.n_cpus // 2, 0) == 1  # any imbalance counts


def test_old_eras_on_one_node_keep_all_memory_local():
    for era in ("3.10", "5.4"):
        from numasim import from_dict, run

        from .conftest import small_scenario

        data = small_scenario(
            machine={"preset": "pacific-broadwell", "cores_per_node": 4, "memory_per_node": "16GiB", "sockets": 1,
                     "slit": None},
            workloads={"java": {"base": "java-transactions", "touch_gbps": 8.0}},
            pods=[{"name": "app", "replicas": 2, "threads": 4, "memory": "2GiB", "profile": "java"}],
            policies=[{"label": era, "policy": "cfs", "options": {"numa_imbalance_kernel": era, "numa_balancing": True}}])
        res = run(from_dict(data), workers=1)
        assert res.run(era).locality == 1.0
        assert res.run(era).throughput > 0


# ---------------------------------------------------------------- one kernel version for every era option

@pytest.mark.parametrize("version, lb, numab, pct, busy, limit, eevdf", [
    ("3.8", "3.10", "3.8", 125, 32, 1280.0, False),      # balancenuma: pages only
    ("3.10", "3.10", "3.8", 125, 32, 1280.0, False),     # mainline 3.10 (RHEL 7 backported later rules)
    ("3.13", "3.10", "3.13", 125, 32, 1280.0, False),    # task placement (Mel Gorman's series)
    ("4.10", "3.10", "4.4", 125, 32, 1280.0, False),
    ("4.18", "5.4", "4.4", 125, 32, 1280.0, False),      # RHEL 8's base: SD_NUMA fork clause, pseudo-interleaving
    ("4.19", "5.4", "5.6", 125, 32, None, False),        # SMALLIMP, no migration rate limit
    ("5.4", "5.4", "5.6", 125, 32, None, False),
    ("5.7", "5.10", "6.1", 125, 32, None, False),        # fb86f5b21192
    ("5.10", "5.10", "6.1", 117, 16, None, False),       # imbalance_pct 117, busy_factor 16
    ("5.15", "5.15", "6.1", 117, 16, None, False),       # the LTS as most run it
    ("5.15.32", "5.11", "6.1", 117, 16, None, False),
    ("5.15.33", "5.15", "6.1", 117, 16, None, False),
    ("5.17", "5.11", "6.1", 117, 16, None, False),
    ("5.18", "5.18", "6.1", 117, 16, None, False),       # e496132ebedd: imb_numa_nr
    ("5.19", "5.18", "6.1", 117, 16, None, False),
    ("6.0", "6.1", "6.1", 117, 16, None, False),         # cb29a5c19d2d, f5b2eeb49991, 026b98a93bbd
    ("6.1", "6.1", "6.1", 117, 16, None, False),
    ("6.6", "6.1", "6.1", 117, 16, None, True),          # EEVDF
])
def test_a_kernel_version_sets_every_era_option(version, lb, numab, pct, busy, limit, eevdf):
    o = CFSOptions(kernel=version)
    assert (o.numa_imbalance_kernel, o.numa_balancing_kernel, o.imbalance_pct_numa, o.busy_factor,
            o.migrate_rate_limit_mbps, o.eevdf) == (lb, numab, pct, busy, limit, eevdf)
    # 3.13 made the scan periods the time to scan the whole address space (598f0ec0bc99): 1 s to 60 s;
    # before, one 256 MB window every 100 ms to 5 s.
    assert (o.scan_period_min_ms, o.scan_period_max_ms) == ((100.0, 5000.0) if numab == "3.8" else (1000.0, 60000.0))


def test_the_scan_periods_follow_the_numa_balancing_era_in_effect_and_must_be_in_order():
    # A 3.10 kernel with later NUMA balancing rules (RHEL 7's backports) scans as those rules do;
    # the 3.8 rules alone take 3.8's absolute periods; a period set by hand wins.
    assert (CFSOptions(kernel="3.10", numa_balancing_kernel="4.4").scan_period_min_ms) == 1000.0
    assert (CFSOptions(numa_balancing_kernel="3.8").scan_period_min_ms,
            CFSOptions(numa_balancing_kernel="3.8").scan_period_max_ms) == (100.0, 5000.0)
    assert CFSOptions(kernel="3.8", scan_period_min_ms=200).scan_period_min_ms == 200.0
    from pydantic import ValidationError
    with pytest.raises(ValidationError, match="scan_period_min_ms .10000. must be at most scan_period_max_ms .5000."):
        CFSOptions(kernel="3.8", scan_period_min_ms=10000)


def test_an_option_set_beside_the_kernel_wins_and_6_1_is_the_default():
    o = CFSOptions(kernel="4.18", numa_balancing_kernel="6.1", imbalance_pct_numa=117)
    assert (o.numa_balancing_kernel, o.imbalance_pct_numa, o.numa_imbalance_kernel) == ("6.1", 117, "5.4")
    # The defaults are 6.1's settings.
    assert CFSOptions(kernel="6.1").model_dump(exclude={"kernel"}) == CFSOptions().model_dump(exclude={"kernel"})


def test_a_kernel_read_as_a_number_is_taken_only_when_unambiguous():
    # --set ...kernel=4.18 and YAML's kernel: 5.15 arrive as numbers with two decimals: those are versions.
    assert CFSOptions(kernel=4.18).numa_imbalance_kernel == "5.4"
    assert CFSOptions(kernel=5.15).numa_imbalance_kernel == "5.15"


@pytest.mark.parametrize("bad", [5.10, 6.1, 6, "5", "linux-5.4", "5.4-rt", "10.1"])
def test_a_kernel_that_is_not_a_version_string_is_refused(bad):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        CFSOptions(kernel=bad)
    assert "kernel" in str(err.value) and "such as" in str(err.value)


@pytest.mark.parametrize("kernel,want", [("6.4", "first"), ("6.5", "last")])
def test_of_equal_fully_busy_groups_6_5_robs_the_last_unless_the_first_is_a_cores_smt_siblings(kernel, want):
    # update_sd_pick_busiest: a fully busy group's avg_load is never computed (0), so they all tie; v5.5-v6.4
    # keep the first, 5fd6d7f43958 (v6.5) takes the last unless the busiest so far is one core's SMT siblings.
    rome = _machine("epyc-7742-nps1")
    cfs = CFS(CFSOptions(kernel=kernel), rome, np.random.default_rng(0))
    pkg = next(li for li, lv in enumerate(cfs.levels) if lv.name == "PKG")  # groups: the node's 16 CCXs
    groups = cfs._domains[pkg][0].groups
    memo = StatsMemo(cfs.levels[pkg].pct)
    idle, full = memo[(8, 4, 0, 0, 8)], memo[(8, 4, 8, 8, 0)]
    stats = [idle] * len(groups)
    for g in (3, 5, 9):
        stats[g] = full
    order = tuple(range(len(groups)))
    assert cfs._pick_busiest(stats, order, 0, groups) == (3 if want == "first" else 9)
    # At the LLC level the groups are cores (SMT siblings): the first stays in either era.
    mc = next(li for li, lv in enumerate(cfs.levels) if lv.name == "MC")
    cores = cfs._domains[mc][0].groups
    memo = StatsMemo(cfs.levels[mc].pct)
    stats = [memo[(2, 1, 0, 0, 2)]] * len(cores)
    stats[1] = stats[2] = memo[(2, 1, 2, 2, 0)]
    assert cfs._pick_busiest(stats, tuple(range(len(cores))), 0, cores) == 1
