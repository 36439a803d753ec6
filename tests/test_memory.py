import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasim.sim.memory import AllocationFailure, Memory
from numasim.policies.api import MemPolicy
from numasim.model.presets import machine_preset

M = machine_preset("pacific-broadwell")
GB = 2**30


def test_first_touch_is_local_then_falls_back():
    mem = Memory(M)
    r = mem.add_region(0, -1, 300 * GB)
    mem.allocate(r, 200 * GB, 1, MemPolicy())
    assert mem.placed(r)[1] == 200 * GB
    mem.allocate(r, 100 * GB, 1, MemPolicy())
    # Node 1 holds 256 GiB: the rest spills to node 0.
    assert mem.placed(r)[1] == 256 * GB and mem.placed(r)[0] == 44 * GB


def test_bind_fails_when_full():
    mem = Memory(M)
    r = mem.add_region(0, -1, 300 * GB)
    with pytest.raises(AllocationFailure):
        mem.allocate(r, 300 * GB, 0, MemPolicy("bind", (0,)))


def test_interleave_spreads_evenly():
    mem = Memory(M)
    r = mem.add_region(0, -1, 10 * GB)
    mem.allocate(r, 10 * GB, 0, MemPolicy("interleave", (0, 1)))
    assert mem.placed(r)[0] == mem.placed(r)[1] == 5 * GB


def test_preferred_uses_its_node_first():
    mem = Memory(M)
    r = mem.add_region(0, -1, 10 * GB)
    mem.allocate(r, 10 * GB, 0, MemPolicy("preferred", (1,)))
    assert mem.placed(r)[1] == 10 * GB


def test_migrate_respects_capacity():
    mem = Memory(M)
    a = mem.add_region(0, -1, 256 * GB)
    b = mem.add_region(1, -1, 10 * GB)
    mem.allocate(a, 256 * GB, 1, MemPolicy())
    mem.allocate(b, 10 * GB, 0, MemPolicy())
    assert mem.migrate(b, 0, 1, 10 * GB) == 0  # node 1 is full


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 200), st.sampled_from(["local", "preferred", "interleave"])), min_size=1, max_size=12))
def test_pages_never_exceed_node_capacity(ops):
    mem = Memory(M)
    for i, (node, gb, kind) in enumerate(ops):
        r = mem.add_region(i, -1, gb * GB)
        pol = MemPolicy(kind, (node,) if kind == "preferred" else ((0, 1) if kind == "interleave" else ()))
        try:
            mem.allocate(r, gb * GB, node, pol)
        except AllocationFailure:
            pass
        assert np.all(mem.used <= mem.capacity)
        assert np.all(mem.used == mem.pod_bytes(len(ops)).sum(axis=0))
