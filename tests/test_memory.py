import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasim.sim.memory import AllocationFailure, Memory
from numasim.policies.api import CHUNK, MemPolicy
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


def _move_one_by_one(mem, rid, idx, dst):
    """The rule :meth:`Memory.move_chunks` keeps, chunk by chunk: placed, elsewhere, and room for it."""
    reg = mem.regions[rid]
    for i in idx:
        size = reg.chunk_bytes(i)
        if reg.node[i] != dst and reg.node[i] >= 0 and mem.capacity[dst] - mem.used[dst] >= size:
            mem._set_node(rid, i, dst)


@settings(max_examples=150, deadline=None)
@given(chunks=st.integers(1, 40), tail=st.integers(0, 2**21 - 1), touched=st.floats(0.0, 1.0),
       hot=st.booleans(), dst=st.integers(0, 1), room=st.integers(0, 45),
       picks=st.lists(st.integers(0, 39), max_size=30), ordered=st.booleans())
def test_moving_chunks_at_once_is_moving_them_one_by_one(chunks, tail, touched, hot, dst, room, picks, ordered):
    from numasim.policies.api import CHUNK
    size = chunks * CHUNK - tail if chunks * CHUNK - tail > 0 else CHUNK
    n = -(-size // CHUNK)
    idx = [i % n for i in picks]
    if ordered:
        idx = sorted(set(idx))  # each chunk once: the summed path (unless a weighted region)
    a, b = Memory(M), Memory(M)
    for mem in (a, b):
        rid = mem.add_region(0, -1, size, (0.25, 0.8) if hot else None)
        mem.allocate(rid, int(size * touched), 0, MemPolicy("interleave", (0, 1)))
        mem.nodes[0, dst] = mem.used[dst] + room * CHUNK  # room for `room` whole chunks on dst
    src, got, moved = a.move_chunks(rid, np.array(idx, dtype=np.int64), dst)
    assert moved == int(got.sum())
    before = b.regions[rid].node.copy()
    _move_one_by_one(b, rid, idx, dst)
    assert np.array_equal(a.ch, b.ch) and np.array_equal(a.used, b.used)
    assert np.array_equal(a._placed, b._placed) and np.array_equal(a._access, b._access)
    went = got > 0
    assert np.array_equal(src[went], before[np.array(idx, dtype=np.int64)[went]])
    assert int(got.sum()) == int(sum(b.regions[rid].chunk_bytes(i) for i in set(np.array(idx)[went].tolist())))


@pytest.mark.parametrize("hot", [False, True])
@pytest.mark.parametrize("bad", [[0, 5], [-1], [2, 2, 9]])
def test_moving_a_chunk_the_region_lacks_changes_nothing(hot, bad):
    """An index outside the region is refused (None) before anything moves, on the compiled path and the
    chunk-by-chunk one (a weighted region, a repeated chunk); the runtime turns it into a PolicyError."""
    mem = Memory(M)
    rid = mem.add_region(0, -1, 5 * CHUNK, (0.25, 0.8) if hot else None)
    mem.allocate(rid, 5 * CHUNK, 0, MemPolicy("local"))
    before = (mem.ch.copy(), mem.used.copy(), mem._placed.copy())
    assert mem.move_chunks(rid, np.array(bad, dtype=np.int64), 1) is None
    assert all(np.array_equal(x, y) for x, y in zip(before, (mem.ch, mem.used, mem._placed)))
