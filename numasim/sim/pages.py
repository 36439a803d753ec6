"""Pages over time: first touch at start-up, page copies (flows and chunk moves), a pod's death.

A part of :class:`numasim.sim.kernel.Simulation`, which holds the state these
methods share (see docs/architecture.md).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..errors import PolicyError
from ..policies.api import MemPolicy, MigratePages, MoveChunks
from . import layout
from .decisions import MAX_COPY_GBPS, MIN_COPY_GBPS, _copy_rate
from .firsttouch import (FT_BIND, FT_LOCAL, FT_PREFERRED, FT_PYTHON, PLAN_ENTRIES, POL_KIND, POL_LOCAL, POL_MASK,
                         POL_NODE)
from .memory import CHUNK, AllocationFailure
from .state import DEAD, WORK
from .trace import PodInstance

__all__ = ["PageRuntime"]

MIGRATION_STEP_NS = 100_000_000  # page copies are applied in 100 ms steps


def touch_policy(pod: PodInstance) -> MemPolicy:
    """The policy a pod's first touch runs under: its workload's bind (``touch_nodes``: the program's own
    set_mempolicy) where the pod runs under the default policy; otherwise the pod's policy (a numactl
    policy, a cgroup's cpuset.mems or a VM's home node), which the program's bind does not escape."""
    bound = pod.profile.touch_nodes
    mp = pod.mempolicy
    return MemPolicy("bind", tuple(bound)) if bound is not None and mp.kind == "local" else mp


class PageRuntime:
    def _touch(self, tid: int, nbytes: float) -> None:
        """Thread ``tid`` first-touches the next ``nbytes`` of its plan (each region in turn) from the node it
        runs on, under its pod's memory policy (the general case of :func:`numasim.sim.firsttouch.touch`)."""
        pod = self.pods[self.t_pod[tid]]
        node = self._cpu_node[self.t_cpu[tid]]
        left = int(round(nbytes))
        if pod.status != "running":
            return
        by = pod.profile.private_touch
        policy = touch_policy(pod)
        plan = self._plan[tid]
        for j in range(0, 2 * PLAN_ENTRIES, 2):
            rid, want = int(plan[j]), int(plan[j + 1])
            if want <= 0 or left <= 0:
                continue
            take = min(want, left)
            try:
                if by == "pod" and rid == self.t_private[tid]:
                    self._touch_round_robin(pod, rid, take, policy)
                elif by == "main" and rid == self.t_private[tid]:
                    self.memory.allocate(rid, take, self._main_node(tid, node), policy)
                else:
                    self.memory.allocate(rid, take, node, policy)
            except AllocationFailure as exc:
                # The page allocator fails: the kernel's OOM killer picks one victim and the
                # allocation is retried once its memory is free (this thread's next event).
                self._oom(exc)
                return
            plan[j + 1] = want - take
            self.t_plan_left[tid] -= take
            left -= take
        self._dirty = True

    def _main_node(self, tid: int, own: int) -> int:
        """The node where the first thread of ``tid``'s process runs (``own`` if it is on no CPU)."""
        cpu = self.t_cpu[self.proc_tids[self.t_proc[tid]][0]]
        return own if cpu < 0 else int(self._cpu_node[cpu])

    def _plans(self, tid: int) -> bool:
        """Whether thread ``tid`` has memory left to first-touch."""
        plan = self._plan[tid]
        return any(plan[j] > 0 for j in range(1, 2 * PLAN_ENTRIES, 2))

    def _set_plan(self, tid: int, plan: list[tuple[int, int]]) -> None:
        """Thread ``tid`` will first-touch these (region, bytes), in order."""
        row = self._plan[tid]
        row[:] = 0
        for j, (rid, nbytes) in enumerate(plan):
            row[2 * j], row[2 * j + 1] = rid, nbytes
        self.t_plan_left[tid] = float(sum(nbytes for _rid, nbytes in plan))

    def _set_touch_policy(self, pod: PodInstance) -> None:
        """How the compiled first touch places the pod's pages (POL_* rows), or leaves them to :meth:`_touch`:
        a pod not running, interleaved memory, private memory touched by another thread (the whole pod's
        collector, or the process's first thread), a first touch bound to some nodes."""
        col = self._pol[:, pod.index]
        col[:] = 0
        mp = pod.mempolicy
        tp = touch_policy(pod)  # (what the touch costs follows it too: Rates._touch_target)
        col[POL_LOCAL] = tp.kind == "local" or (tp.kind == "preferred" and not tp.nodes)
        if pod.status != "running" or pod.profile.private_touch != "owner" or tp is not mp \
                or (mp.kind == "interleave" and mp.nodes):
            col[POL_KIND] = FT_PYTHON
        elif mp.kind == "preferred" and mp.nodes:
            col[POL_KIND], col[POL_NODE] = FT_PREFERRED, mp.nodes[0]
        elif mp.kind == "bind":
            col[POL_KIND] = FT_BIND
            for n in mp.nodes:
                col[POL_MASK + n] = 1
        else:
            col[POL_KIND] = FT_LOCAL

    def _touch_round_robin(self, pod: PodInstance, rid: int, nbytes: int, policy: MemPolicy) -> None:
        """First-touch the next ``nbytes`` of region ``rid`` a chunk at a time from the nodes where the
        threads of its process run, in turn (the threads of a copying collector, which run wherever
        the process does).

        The turn is the process's, not the region's: successive chunks of all its threads' regions
        cycle through all its threads, so a region of a few chunks does not always start at
        the same threads."""
        reg = self.memory.regions[rid]
        proc = reg.proc
        nodes = [self._cpu_node[self.t_cpu[t]] for t in self.proc_tids[proc] if self.t_cpu[t] >= 0]
        end = min(reg.size, reg.touched + nbytes)
        while reg.touched < end:
            piece = min(end, (reg.touched // CHUNK + 1) * CHUNK) - reg.touched
            turn = self._touch_turn.get(proc, 0)
            self._touch_turn[proc] = turn + 1
            self.memory.allocate(rid, piece, nodes[turn % len(nodes)], policy)

    def _finish_touch(self, tid: int) -> None:
        self.t_phase[tid] = WORK
        pod = self.pods[self.t_pod[tid]]
        members = self.proc_tids[self.t_proc[tid]]
        if pod.profile.touch == "main" and tid == members[0]:
            for other in members[1:]:
                self._start_thread(other)
        self._set_tau(np.array([tid]))
        self._solve_soon()
        self._begin_work(tid)

    def _oom(self, exc: AllocationFailure) -> None:
        """out_of_memory: kill the running pod with the most memory on the nodes the failed
        allocation could use (oom_badness counts a task's resident memory; the youngest of
        equals), unless a kill is already on its way. The kill is its own event, right after
        this one: killing in the middle of integrating a thread would pull it from under
        its caller."""
        if any(p.status == "failing" for p in self.pods):
            return
        nodes = list(exc.nodes) or list(range(self.machine.n_nodes))
        usage = self.memory.pod_bytes(len(self.pods))[:, nodes].sum(axis=1)
        running = [p for p in self.pods if p.status == "running" and usage[p.index] > 0]
        if not running:
            running = [self.pods[self.memory.regions[exc.region].pod]]
        victim = max(running, key=lambda p: (usage[p.index], p.index))
        victim.status = "failing"
        self._set_touch_policy(victim)
        self._P[layout.P_OPEN, victim.index] = 0  # its open-mode arrivals stop (the one drawn still comes)
        ev = self.env.timeout(0)
        ev.callbacks.append(lambda _e, p=victim, r=f"out of memory: {exc}": self._kill(p, r))

    def _kill(self, pod: PodInstance, reason: str) -> None:
        if pod.status == "failed":
            return
        pod.status = "failed"
        self._set_touch_policy(pod)
        pod.reason = reason
        self._event("failed", f"{pod.name}: {reason}")
        cpus = [self.t_cpu[t] for t in pod.all_tids if self.t_active[t]]
        self._integrate(list(pod.all_tids) + self._on_cpus(cpus))
        for tid in pod.all_tids:
            if self.t_active[tid]:
                self._dequeue(tid)
            self.t_phase[tid] = DEAD
            self.t_held[tid] = False
            self.t_gen[tid] += 1
            self._set_plan(tid, [])
            self._log_place(self.env.now, tid, -1)
        for rid, reg in enumerate(self.memory.regions):
            if reg.pod == pod.index:
                self.memory.release(rid)
        self._flows.pop(pod.index, None)
        self._update_cpus(cpus, integrated=True)
        self._dirty = True

    def _move_chunks(self, d: MoveChunks) -> None:
        self._index(d.region, len(self.memory.regions), "region", d)
        self._index(d.dst, self.machine.n_nodes, "node", d)
        if not _copy_rate(d.copy_gbps):
            raise PolicyError(self.policy.name, self.now, d,
                              f"copy_gbps must be a number of GB/s from {MIN_COPY_GBPS:g} to {MAX_COPY_GBPS:g}")
        if isinstance(d.tid, (bool, np.bool_)) or not isinstance(d.tid, (int, np.integer)) or not -1 <= d.tid < len(self.t_cpu):
            raise PolicyError(self.policy.name, self.now, d, "tid must be a thread id, or -1 for a kernel thread")
        reg = self.memory.regions[d.region]
        idx = np.asarray(d.chunks)
        moves = (self.memory.move_chunks(d.region, idx.astype(np.int64), d.dst)
                 if idx.ndim == 1 and (idx.dtype.kind in "iu" or not idx.size) else None)
        if moves is None:
            raise PolicyError(self.policy.name, self.now, d, "chunks must be indices of the region's chunks")
        src, got, moved = moves
        if moved and self.machine.n_nodes > len(self.machine.cpu_nodes):
            up = d.dst in self._cpu_node_set  # a promotion to a node with CPUs, else a demotion from one
            shifted = sum(g for s, g in zip(src.tolist(), got.tolist()) if g and (s in self._cpu_node_set) != up)
            if up:
                self.c_promoted[reg.pod] += shifted
            else:
                self.c_demoted[reg.pod] += shifted
        if moved:
            self.c_pages_moved[reg.pod] += moved
            self._dirty = True
            if d.tid < 0:  # the reclaim thread of the node the first moved chunk left
                self._kswapd(int(src[np.flatnonzero(got)[0]]), moved / d.copy_gbps)
                return
            self._integrate((d.tid,))
            cost = moved / d.copy_gbps
            self.t_debt[d.tid] += cost
            self.c_kernel_ns[d.tid] += cost

    def _kswapd(self, node: int, cost_ns: float) -> None:
        """A node's reclaim thread (kswapdN, bound to that node's CPUs) copies for ``cost_ns``: on an
        idle CPU of the node it costs no pod anything; with every CPU busy it takes that time from
        the least loaded one, whose threads each lose their share of it."""
        cpus = [c for c in range(self.machine.n_cpus) if self._cpu_node[c] == node]
        if not cpus:
            return  # a CPU-less node: its kswapd runs on the nearest CPUs (not modelled)
        cpu = min(cpus, key=lambda c: self.nr[c])
        if self.nr[cpu] == 0:
            return
        here = self._runqueue(cpu)
        self._integrate(here)
        for t in here:
            self.t_debt[t] += cost_ns / len(here)
        self._update_cpus([cpu], integrated=True)

    def _start_flow(self, d: MigratePages) -> None:
        flow = {"d": d, "left": int(d.nbytes)}
        self._flows[d.pod] = flow
        self.env.process(self._flow(flow))

    def _flow(self, flow: dict):
        d: MigratePages = flow["d"]
        self._solve()
        while flow["left"] > 0 and self._flows.get(d.pod) is flow:
            yield self.env.timeout(MIGRATION_STEP_NS)
            if self._flows.get(d.pod) is not flow:
                return
            budget = int(min(flow["left"], d.rate_gbps * MIGRATION_STEP_NS))
            moved = self._copy_pages(d.pod, d.dst, budget)
            flow["left"] = 0 if moved == 0 else flow["left"] - moved
            if flow["left"] <= 0:
                del self._flows[d.pod]
            self._solve()

    def _copy_pages(self, pod_index: int, dst: int, budget: int) -> int:
        pod = self.pods[pod_index]
        rids = list(dict.fromkeys(self.t_shared_rid[t] for t in pod.tids)) + [self.t_private[t] for t in pod.tids]
        per = np.array([self.memory.placed(r) for r in rids])  # regions x nodes
        per[:, dst] = 0
        total = per.sum()
        if total <= 0 or budget <= 0:
            return 0
        moved = 0
        for r, row in zip(rids, per):
            for src in np.flatnonzero(row):
                got = self.memory.migrate(r, int(src), dst, int(budget * row[src] / total))
                if got:
                    moved += got
        self.c_pages_moved[pod_index] += moved
        return moved

    def _flow_traffic(self, flow: dict, node: NDArray, link: NDArray) -> None:
        d: MigratePages = flow["d"]
        held = self.memory.pod_bytes(len(self.pods))[d.pod].astype(float)
        held[d.dst] = 0
        if held.sum() <= 0:
            return
        src_share = held / held.sum()
        node += d.rate_gbps * src_share
        node[d.dst] += d.rate_gbps
        link[d.dst] += d.rate_gbps * src_share
