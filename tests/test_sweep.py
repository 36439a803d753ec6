"""numasim sweep: points, rows, Parquet, resume, a lost worker (dask.distributed)."""

from __future__ import annotations

import pandas as pd
import pytest

import numasim
from numasim.cli import main
from numasim.sweep import sweep_points

from .conftest import small_scenario


def _scenario() -> dict:
    return small_scenario(duration="1s", warmup="500ms", policies=[{"label": "cfs", "policy": "cfs"},
                                                                   {"label": "numactl", "policy": "numactl"}])


def test_points_are_the_grid_times_the_sample():
    pts = sweep_points({"a": [1, 2], "b": ["x", "y", "z"]})
    assert len(pts) == 6 and pts[0] == {"a": 1, "b": "x"} and pts[-1] == {"a": 2, "b": "z"}
    sampled = sweep_points({"a": [1, 2]}, sample=5, ranges={"c": (10.0, 20.0)}, seed=3)
    assert len(sampled) == 10 and all(10 <= p["c"] <= 20 for p in sampled)
    # Latin hypercube: each fifth of the range holds exactly one of a grid point's 5 samples.
    assert sorted(int((p["c"] - 10) // 2) for p in sampled[:5]) == [0, 1, 2, 3, 4]
    assert sweep_points({}, sample=5, ranges={"c": (10.0, 20.0)}, seed=3) == sweep_points({}, 5, {"c": (10.0, 20.0)}, 3)


def test_a_sweep_gives_one_row_per_point_and_variant(tmp_path):
    out = tmp_path / "s.parquet"
    frame = numasim.sweep(_scenario(), grid={"pods.0.replicas": [1, 2], "machine.interconnect_gbps": [5.0, 30.3]},
                          out=out, workers=2, quiet=True)
    assert len(frame) == 8 and frame["point"].nunique() == 4
    assert set(frame["pods.0.replicas"]) == {1, 2} and set(frame["machine.interconnect_gbps"]) == {5.0, 30.3}
    assert {"label", "throughput", "relative_throughput", "locality", "memory_gbps"} <= set(frame.columns)
    assert (frame[frame.label == "cfs"]["relative_throughput"] == 1.0).all()
    on_disk = pd.read_parquet(out)
    assert len(on_disk) == 8 and not (tmp_path / "s.parquet.parts").exists()
    # Each point is the same as numasim run of that scenario.
    data = _scenario()
    data["pods"][0]["replicas"] = 2
    data["machine"]["interconnect_gbps"] = 5.0
    direct = numasim.run(numasim.from_dict(data), workers=1, quiet=True, with_sla=False)
    row = frame[(frame["pods.0.replicas"] == 2) & (frame["machine.interconnect_gbps"] == 5.0) & (frame.label == "numactl")]
    assert row["throughput"].iloc[0] == direct.run("numactl").throughput


def test_a_stopped_sweep_resumes_without_running_a_point_twice(tmp_path):
    out = tmp_path / "s.parquet"
    grid = {"pods.0.replicas": [1, 2, 3]}
    seen: list[str] = []

    def stop_after_one(key, done, failed, total):
        seen.append(key)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        numasim.sweep(_scenario(), grid=grid, out=out, workers=1, quiet=True, on_point=stop_after_one)
    # The point the client saw has its part; so may a point the worker finished while the sweep stopped.
    kept = {f.stem for f in (tmp_path / "s.parquet.parts").glob("*.parquet")}
    assert not out.exists() and seen[0] in kept
    ran: list[str] = []
    frame = numasim.sweep(_scenario(), grid=grid, out=out, workers=1, quiet=True,
                          on_point=lambda key, *_: ran.append(key))
    assert len(ran) == 3 - len(kept) and not kept & set(ran) and frame["point"].nunique() == 3
    again: list[str] = []
    numasim.sweep(_scenario(), grid=grid, out=out, workers=1, quiet=True, on_point=lambda key, *_: again.append(key))
    assert again == []  # everything is in the file already


def test_a_lost_worker_loses_no_point(tmp_path):
    from distributed import LocalCluster

    out = tmp_path / "s.parquet"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=50) as cluster:
        killed: list[str] = []

        def kill_one(key, done, failed, total):
            if not killed:
                nanny = next(iter(cluster.workers.values()))
                nanny.process.process.kill()  # the worker process dies mid-sweep; the nanny restarts it
                killed.append(key)

        frame = numasim.sweep(_scenario(), grid={"pods.0.replicas": [1, 2, 3, 4, 5, 6]}, out=out,
                              scheduler=cluster.scheduler_address, quiet=True, on_point=kill_one)
    assert killed and frame["point"].nunique() == 6 and len(frame) == 12
    assert not frame.duplicated(["point", "label"]).any()


def test_the_cli_and_bad_points(tmp_path, capsys):
    out = tmp_path / "s.parquet"
    path = tmp_path / "small.yaml"
    import yaml

    path.write_text(yaml.safe_dump(_scenario()))
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=1,2", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    assert "2 points, 4 rows" in capsys.readouterr().out
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=1,0", "--out", str(tmp_path / "t.parquet")]) == 2
    err = capsys.readouterr().err
    assert "pods.0.replicas=0" in err and "replicas" in err  # the bad point is named before anything runs
    assert main(["sweep", str(path), "--out", str(tmp_path / "u.parquet")]) == 2
    assert "no points" in capsys.readouterr().err


def test_a_worker_writes_its_part_and_a_sweep_resumes_from_it(tmp_path):
    from numasim.sweep import _key, _point_data, _run_point

    out = tmp_path / "s.parquet"
    parts = tmp_path / "s.parquet.parts"
    parts.mkdir()
    point = {"pods.0.replicas": 2}
    data = _point_data(_scenario(), point, "a test")
    key = _key(data, None, None)
    rows = _run_point(data, "a test", point, key, None, None, str(parts))  # as a worker runs it
    assert [f.name for f in parts.iterdir()] == [f"{key}.parquet"]  # the part, and no temporary file left
    assert pd.read_parquet(parts / f"{key}.parquet").equals(pd.DataFrame(rows))
    ran: list[str] = []
    frame = numasim.sweep(_scenario(), grid={"pods.0.replicas": [1, 2, 3]}, out=out, workers=1, quiet=True,
                          on_point=lambda k, *_: ran.append(k))
    assert len(ran) == 2 and key not in ran and frame["point"].nunique() == 3 and not parts.exists()
    assert frame[frame.point == key].reset_index(drop=True).equals(pd.DataFrame(rows))
    # A worker that does not see the directory (another machine) writes nothing and still returns the rows.
    assert _run_point(data, "a test", point, key, None, None, str(tmp_path / "elsewhere")) == rows


def _threads_cluster():
    """A cluster in this process: its workers run tasks in threads, so that a test can patch what they call."""
    from distributed import LocalCluster

    return LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                        silence_logs=50)


def test_the_client_writes_the_parts_when_the_workers_cannot(tmp_path, monkeypatch):
    import importlib
    import threading

    sweep_module = importlib.import_module("numasim.sweep")  # the module: numasim.sweep is also the function

    real = sweep_module._write_part
    by_client: list[str] = []

    def only_the_client(parts, key, rows):
        if threading.current_thread() is not threading.main_thread():
            raise OSError("read-only file system")  # a worker whose filesystem is not the client's
        by_client.append(key)
        real(parts, key, rows)

    monkeypatch.setattr(sweep_module, "_write_part", only_the_client)
    out = tmp_path / "s.parquet"
    seen: list[tuple[str, bool]] = []
    with _threads_cluster() as cluster:
        frame = numasim.sweep(_scenario(), grid={"pods.0.replicas": [1, 2, 3]}, out=out,
                              scheduler=cluster.scheduler_address, quiet=True,
                              on_point=lambda k, *_: seen.append((k, (tmp_path / "s.parquet.parts" / f"{k}.parquet")
                                                                 .exists())))
    assert sorted(by_client) == sorted(k for k, _ in seen) and all(there for _, there in seen)
    assert frame["point"].nunique() == 3 and pd.read_parquet(out).equals(frame)


def test_a_point_that_fails_is_reported_and_the_others_are_kept(tmp_path, monkeypatch):
    import numasim.runner

    real = numasim.runner.run

    def fails_at_three(scenario, **kw):
        if scenario.spec.pods[0].replicas == 3:
            raise RuntimeError("a broken point")
        return real(scenario, **kw)

    out = tmp_path / "s.parquet"
    grid = {"pods.0.replicas": [1, 2, 3, 4]}
    monkeypatch.setattr(numasim.runner, "run", fails_at_three)
    progress: list[tuple[int, int]] = []
    with _threads_cluster() as cluster, pytest.raises(numasim.NumasimError, match="1 of 4 sweep points failed"):
        numasim.sweep(_scenario(), grid=grid, out=out, scheduler=cluster.scheduler_address, quiet=True,
                      on_point=lambda k, done, failed, total: progress.append((done, failed)))
    assert progress[-1] == (3, 1) and len(progress) == 4  # progress for every point, the failed one too
    assert set(pd.read_parquet(out)["pods.0.replicas"]) == {1, 2, 4}
    monkeypatch.setattr(numasim.runner, "run", real)
    ran: list[str] = []
    frame = numasim.sweep(_scenario(), grid=grid, out=out, workers=1, quiet=True, on_point=lambda k, *_: ran.append(k))
    assert len(ran) == 1 and frame["point"].nunique() == 4 and not (tmp_path / "s.parquet.parts").exists()


def test_local_workers_are_forked_on_linux_and_the_config_is_restored():
    import sys

    import dask
    import distributed  # noqa: F401  (its config defaults: read below before the block, as after it)

    from numasim.sweep_dask import local_workers

    method = "distributed.worker.multiprocessing-method"
    before = dask.config.get(method), dask.config.get("distributed.worker.profile.enabled")
    with local_workers():
        assert dask.config.get(method) == ("fork" if sys.platform.startswith("linux") else before[0])
        assert dask.config.get("distributed.worker.profile.enabled") is False
    assert (dask.config.get(method), dask.config.get("distributed.worker.profile.enabled")) == before
    assert "comm" in dask.config.get("distributed")  # distributed's own settings are still there


def test_bad_sweep_options_are_refused_before_anything_runs(tmp_path, capsys):
    import yaml

    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(_scenario()))
    out = tmp_path / "s.parquet"
    rng = ["--range", "machine.interconnect_gbps=1..2"]
    cases = [
        (["--sample", "-3", *rng], "--sample: must be 1-100000, got -3"),
        (["--sample", "2", *rng, "--sample-seed", "-1"], "--sample-seed: must be 0..2**63-1, got -1"),
        (["--grid", "pods.0.replicas=1,2", "--grid", "pods.0.replicas=3"], "--grid pods.0.replicas: given twice"),
        (["--sample", "2", *rng, "--range", "machine.interconnect_gbps=3..4"],
         "--range machine.interconnect_gbps: given twice"),
        (["--grid", "pods.0.replicas=1,2", "--scheduler", "foo"], "--scheduler foo: not a scheduler address"),
        (["--grid", "pods.0.replicas=1,2", "--scheduler", "http://[::1"], "--scheduler http://[::1: not a scheduler address"),
        (["--grid", "pods.0.replicas=1,2", "--scheduler", "inproc://x"], "--scheduler inproc://x: cannot connect"),
    ]
    for extra, message in cases:
        assert main(["sweep", str(path), "--out", str(out), "--quiet", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.yaml"]  # nothing left behind
    with pytest.raises(numasim.ScenarioError, match="--sample: must be 1-100000"):
        sweep_points({}, sample=-3, ranges={"c": (1.0, 2.0)})


@pytest.mark.parametrize("greeting, message", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not a dask scheduler: its first bytes b'HTTP/1.1'"),
    (None, "connected, but nothing came within 0.5 s"),
])
def test_a_scheduler_address_where_another_service_listens_is_refused(tmp_path, capsys, monkeypatch, greeting,
                                                                      message):
    # Dask's client would try to allocate the size those bytes read as (3 EiB), or wait out its timeout.
    import socket
    import sys
    import threading

    import yaml

    monkeypatch.setattr(sys.modules["numasim.sweep_dask"], "PROBE_S", 0.5)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    conns = []

    def serve():
        conn, _ = server.accept()
        conns.append(conn)
        if greeting:
            conn.sendall(greeting)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(_scenario()))
    try:
        rc = main(["sweep", str(path), "--out", str(tmp_path / "s.parquet"), "--quiet",
                   "--grid", "pods.0.replicas=1,2", "--scheduler", f"127.0.0.1:{port}"])
    finally:
        thread.join(5)
        for c in conns:
            c.close()
        server.close()
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.yaml"]


def test_the_files_beside_out_are_checked_before_anything_runs(tmp_path, capsys):
    import yaml

    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(_scenario()))
    (tmp_path / "clash.parquet.parts").write_text("")
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=1,2", "--out", str(tmp_path / "clash.parquet")]) == 2
    assert "clash.parquet.parts exists and is not a directory" in capsys.readouterr().err
    long = tmp_path / ("x" * 250)  # a name the system takes, but not NAME.parts beside it
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=1,2", "--out", str(long)]) == 2
    err = capsys.readouterr().err
    assert "the path is too long for a sweep" in err and "249 bytes per name" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clash.parquet.parts", "small.yaml"]


def test_out_holding_another_sweep_or_another_file_is_refused_and_kept(tmp_path, capsys):
    import yaml

    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(_scenario()))
    out = tmp_path / "s.parquet"
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=1,2", "--out", str(out), "--workers", "1",
                 "--quiet"]) == 0
    before = out.read_bytes()
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=3", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{out} holds 2 points of another sweep" in err and "choose another --out" in err
    assert out.read_bytes() == before and not (tmp_path / "s.parquet.parts").exists()
    foreign = tmp_path / "mine.parquet"
    pd.DataFrame({"a": [1, 2]}).to_parquet(foreign)
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=1", "--out", str(foreign), "--quiet"]) == 2
    assert "is not a sweep's result (no 'point' column)" in capsys.readouterr().err
    assert pd.read_parquet(foreign)["a"].tolist() == [1, 2]


def test_a_sweep_whose_every_point_fails_leaves_nothing(tmp_path, monkeypatch):
    import numasim.runner

    def fails(scenario, **kw):
        raise RuntimeError("a broken point")

    out = tmp_path / "s.parquet"
    monkeypatch.setattr(numasim.runner, "run", fails)
    with _threads_cluster() as cluster, pytest.raises(numasim.NumasimError, match="2 of 2 sweep points failed"):
        numasim.sweep(_scenario(), grid={"pods.0.replicas": [1, 2]}, out=out, scheduler=cluster.scheduler_address,
                      quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_over_its_budget_is_refused_before_anything_runs(tmp_path, capsys):
    import yaml

    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(_scenario()))
    out = tmp_path / "s.parquet"
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=1,2,3", "--out", str(out), "--max-work", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "--max-work: the first 1 of this sweep's 3 points to run are already estimated at 2 simulations" in err, err
    assert "sweep fewer points" in err and "Traceback" not in err
    assert main(["sweep", str(path), "--grid", "pods.0.replicas=1", "--out", str(out), "--max-memory", "0.000001"]) == 2
    assert "--max-memory: one simulation is estimated to need" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.yaml"]


def test_a_range_over_a_whole_number_field_samples_whole_numbers(tmp_path):
    from numasim.sweep import _whole_paths

    ranges = {"pods.0.replicas": (1.0, 4.0), "machine.interconnect_gbps": (5.0, 30.0)}
    assert _whole_paths(_scenario(), ranges, "a test") == {"pods.0.replicas"}
    pts = sweep_points({}, sample=8, ranges=ranges, seed=1, whole={"pods.0.replicas"})
    # Each of 1..4 is a quarter of the unit interval: a Latin hypercube of 8 gives each twice.
    assert sorted(p["pods.0.replicas"] for p in pts) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert all(isinstance(p["pods.0.replicas"], int) for p in pts)
    assert not all(float(p["machine.interconnect_gbps"]).is_integer() for p in pts)
    with pytest.raises(numasim.ScenarioError, match="takes whole numbers, and there is none in 1.2..1.8"):
        sweep_points({}, sample=2, ranges={"pods.0.replicas": (1.2, 1.8)}, whole={"pods.0.replicas"})
    # A real-valued field whose value between two whole numbers is refused for a bound is not a whole-number field.
    assert _whole_paths(_scenario(), {"machine.smt_yield": (1.5, 2.5)}, "a test") == set()
    # Whole numbers sampled twice are one point, run once: 4 samples of 1..2 are two points.
    seen: list[str] = []
    frame = numasim.sweep(_scenario(), sample=4, ranges={"pods.0.replicas": (1.0, 2.0)}, out=tmp_path / "s.parquet",
                          workers=1, quiet=True, on_point=lambda key, *_: seen.append(key))
    assert sorted(frame["pods.0.replicas"]) == [1, 1, 2, 2] and len(seen) == len(set(seen)) == 2
    assert not frame.duplicated(["point", "label"]).any()


def test_a_range_refused_at_a_bound_is_refused_not_rounded(tmp_path):
    with pytest.raises(numasim.ScenarioError, match="smt_yield"):
        numasim.sweep(_scenario(), sample=3, ranges={"machine.smt_yield": (1.5, 2.5)}, out=tmp_path / "s.parquet",
                      quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_out_left_when_every_point_failed_is_resumed(tmp_path):
    out = tmp_path / "s.parquet"
    pd.DataFrame().to_parquet(out)  # what numasim wrote before session 29 when every point failed
    frame = numasim.sweep(_scenario(), grid={"pods.0.replicas": [1]}, out=out, workers=1, quiet=True)
    assert frame["point"].nunique() == 1 and len(pd.read_parquet(out)) == 2


def test_a_parts_folder_that_is_a_symbolic_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "s.parquet.parts").symlink_to(elsewhere)
    with pytest.raises(numasim.NumasimError, match="s.parquet.parts is a symbolic link"):
        numasim.sweep(_scenario(), grid={"pods.0.replicas": [1]}, out=tmp_path / "s.parquet", quiet=True)
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "s.parquet").exists()


def test_a_large_sweep_says_it_is_checking_its_points(capsys):
    # Checking and costing take up to a few ms a point: from 1,000 points a sweep says so first.
    import importlib

    sweep = importlib.import_module("numasim.sweep")
    grid = {"seed": list(range(1000))}
    with pytest.raises(numasim.NumasimError, match="--max-work"):
        sweep.sweep(_scenario(), grid=grid, max_work_s=1e-9)  # refused at the first point costed
    assert "sweep: checking and costing 1,000 points before any runs" in capsys.readouterr().err
    with pytest.raises(numasim.NumasimError, match="--max-work"):
        sweep.sweep(_scenario(), grid={"seed": list(range(999))}, max_work_s=1e-9)
    assert "checking and costing" not in capsys.readouterr().err


def test_a_sweep_checks_the_seed_and_takes_one_policy_name_whole():
    import importlib

    sweep = importlib.import_module("numasim.sweep")
    with pytest.raises(numasim.NumasimError, match=r"--seed: expected a whole number from 0 to [0-9,]+ \(2\*\*63-1\), got -1"):
        sweep.sweep(_scenario(), grid={"seed": [1, 2]}, seed=-1)  # before any cluster starts
    with pytest.raises(numasim.NumasimError, match="--max-work"):  # 'numactl' is a label, not seven letters
        sweep.sweep(_scenario(), grid={"seed": [1, 2]}, policies="numactl", max_work_s=1e-9)


def test_points_that_share_a_machine_share_its_build():
    # A sweep checks every point: its points mostly have one machine, built once (the few built last are kept).
    from numasim.model import machine as sc

    a = numasim.from_dict(_scenario())
    b = numasim.from_dict({**_scenario(), "seed": 7})
    assert a.machine is b.machine
    other = numasim.from_dict({**_scenario(), "machine": {"preset": "skylake-8180", "smt": False}})
    assert other.machine is not a.machine and other.machine.n_cpus != a.machine.n_cpus
    for k in range(sc.RECENT_MACHINES):  # the least recently used go first
        numasim.from_dict({**_scenario(), "machine": {"preset": "skylake-8180", "cores_per_node": 2 + k}})
    assert numasim.from_dict(_scenario()).machine is not a.machine
    assert all(m.n_cpus <= sc.RECENT_MAX_CPUS for m in sc._RECENT.values())


def test_a_planted_temporary_file_beside_out_is_never_written_through(tmp_path):
    # The final Parquet is written to a new file of a random name, never through a link or a file
    # that is there already (adversarial pass 5: a planted .OUT.tmp link made a sweep overwrite its scenario).
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / ".s.parquet.tmp").symlink_to(victim)
    (tmp_path / ".t.parquet.tmp").mkdir()
    for name in ("s.parquet", "t.parquet"):
        frame = numasim.sweep(_scenario(), grid={"seed": [1]}, out=tmp_path / name, workers=1, quiet=True)
        out = tmp_path / name
        assert out.is_file() and not out.is_symlink() and len(pd.read_parquet(out)) == len(frame) == 2
    assert victim.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.parquet.tmp", ".t.parquet.tmp", "s.parquet",
                                                          "t.parquet", "victim.txt"]


def test_a_grid_of_numbers_and_text_is_written_as_text(tmp_path):
    # warmup: 0 and 0.1s are both valid; Parquet holds one type a column, so the column is text.
    out = tmp_path / "m.parquet"
    frame = numasim.sweep(_scenario(), grid={"warmup": [0, "100ms"], "pods.0.replicas": [1]}, out=out, workers=1,
                          quiet=True)
    assert sorted(set(frame["warmup"])) == ["0", "100ms"] and set(frame["pods.0.replicas"]) == {1}
    assert sorted(set(pd.read_parquet(out)["warmup"])) == ["0", "100ms"]


def test_the_python_api_refuses_what_the_command_line_would(tmp_path):
    import numpy as np

    from numasim.errors import NumasimError

    s = _scenario()
    bad = [
        (dict(grid=[("seed", [1])]), "--grid: expected a mapping"),
        (dict(grid={5: [1, 2]}), "--grid: expected text paths"),
        (dict(grid={"name": [b"x", "y"]}), "--grid name: expected a number, text"),
        (dict(grid={"seed": "12"}), "--grid seed: expected a list of values"),
        (dict(sample=2, ranges={"seed": ("a", "b")}), "--range seed: expected a pair of numbers"),
        (dict(grid={"seed": [1]}, policies=5), "--policy: expected"),
        (dict(grid={"seed": [1]}, workers=-1), "--workers: expected a whole number from 0"),
        (dict(grid={"seed": [1]}, out=5), "--out: expected a file name"),
        (dict(grid={"seed": [1]}, scheduler=""), "--scheduler: the address is empty"),
        (dict(grid={"seed": [1]}, sets=5), "--set: expected"),
    ]
    for kwargs, message in bad:
        with pytest.raises(NumasimError, match=message.replace("(", r"\(").replace("[", r"\[")):
            numasim.sweep(s, quiet=True, **kwargs)
    # numpy values, tuples and one --set string are taken as the command line takes them
    frame = numasim.sweep(s, grid={"seed": np.arange(1, 3), "pods.0.replicas": (np.int64(1),)},
                          sets="duration=1s", workers=np.int64(1), quiet=True)
    assert sorted(set(frame["seed"])) == [1, 2]
