"""numasim k8s import: a node's pods and kubelet configuration as a scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import numasim
from numasim.cli import main

K8S = Path(__file__).parent / "fixtures" / "k8s"


def _import(tmp_path, capsys, *extra: str) -> tuple[int, dict | None, str]:
    out = tmp_path / "node.yaml"
    code = main(["k8s", "import", str(K8S / "pods.json"), "--machine", "cascadelake-8280", "-o", str(out), *extra])
    err = capsys.readouterr().err
    return code, (yaml.safe_load(out.read_text()) if out.exists() else None), err


def test_pods_of_one_owner_become_one_group_with_their_resources(tmp_path, capsys):
    code, sc, err = _import(tmp_path, capsys, "--kubelet-config", str(K8S / "kubelet-config.yaml"))
    assert code == 0
    pods = {p["name"]: p for p in sc["pods"]}
    # Running pods of worker-1 outside kube-system; the Succeeded job and worker-2's pod are left out.
    assert set(pods) == {"checkout-7d9f8c6b5", "postgres", "search-6c8d", "batch-job"}
    co = pods["checkout-7d9f8c6b5"]
    assert (co["replicas"], co["cpu_limit"], co["threads"], co["memory"]) == (3, 4.5, 5, "8704MiB")  # 4 + 500m, 8Gi + 512Mi
    assert pods["search-6c8d"]["requests"] == {"cpu": 2.0, "memory": "4GiB"} and pods["search-6c8d"]["cpu_limit"] == 3.0
    assert "cpu_limit" not in pods["batch-job"] and pods["batch-job"]["memory"] == "1953125KiB"  # 2000000000 bytes
    kubelet = sc["policies"][1]["options"]
    assert kubelet == {"cpu_manager_policy": "static", "topology_manager_policy": "single-numa-node",
                       "topology_manager_scope": "pod", "memory_manager_policy": "Static", "reserved_cpus": "0,56",
                       "reserved_memory": "1100MiB", "cfs_quota": True}
    assert sc["baseline"] == "default-kubelet" and "guessed" in err and "pods run on 2 nodes" in err
    scenario = numasim.from_dict(sc)  # it validates and runs
    assert [v.label for v in scenario.variants] == ["default-kubelet", "kubelet"]


def test_another_node_and_namespaces(tmp_path, capsys):
    code, sc, _ = _import(tmp_path, capsys, "--node", "worker-2")
    assert code == 0 and [p["name"] for p in sc["pods"]] == ["web-5b7"]
    code, sc, _ = _import(tmp_path, capsys, "--exclude-namespace", "batch")
    assert code == 0 and "kube-proxy" in {p["name"] for p in sc["pods"]}  # kube-system is kept when not excluded


def test_bad_inputs_are_explained(tmp_path, capsys):
    code, _, err = _import(tmp_path, capsys, "--node", "nope")
    assert code == 2 and "no pods on node 'nope'" in err
    bad = tmp_path / "pods.json"
    data = json.loads((K8S / "pods.json").read_text())
    data["items"][0]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    bad.write_text(json.dumps(data))
    out = tmp_path / "o.yaml"
    code = main(["k8s", "import", str(bad), "--machine", "cascadelake-8280", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "items[0].spec.containers[0].resources.limits.cpu" in err and not out.exists()
    bad.write_text("{not json")
    assert main(["k8s", "import", str(bad), "--machine", "cascadelake-8280", "-o", str(out)]) == 2
    assert "not the JSON of kubectl get pods -o json" in capsys.readouterr().err
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text("cpuManagerPolicy: dynamic\n")
    assert main(["k8s", "import", str(K8S / "pods.json"), "--kubelet-config", str(cfg), "--machine",
                 "cascadelake-8280", "-o", str(out)]) == 2
    assert "'dynamic' is not one of none, static" in capsys.readouterr().err


def _edited_pods(tmp_path, edit) -> Path:
    data = json.loads((K8S / "pods.json").read_text())
    edit(data["items"][0])
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(data))
    return path


def _refused(tmp_path, capsys, pods: Path, *extra: str) -> str:
    out = tmp_path / "o.yaml"
    code = main(["k8s", "import", str(pods), "--machine", "cascadelake-8280", "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists() and "Traceback" not in err
    return err


def _container(pod: dict) -> dict:
    return pod["spec"]["containers"][0]


@pytest.mark.parametrize("edit, words", [
    (lambda p: p.__setitem__("metadata", "x"), "items[0].metadata: expected an object, got a string"),
    (lambda p: p.__setitem__("spec", [1]), "items[0].spec: expected an object, got a list"),
    (lambda p: p.__setitem__("status", 5), "items[0].status: expected an object, got a number"),
    (lambda p: _container(p).__setitem__("resources", "x"),
     "items[0].spec.containers[0].resources: expected an object, got a string"),
    (lambda p: _container(p)["resources"].__setitem__("limits", "x"),
     "items[0].spec.containers[0].resources.limits: expected an object, got a string"),
    (lambda p: p["spec"]["containers"].__setitem__(0, 5), "items[0].spec.containers[0]: expected an object"),
    (lambda p: _container(p)["resources"]["limits"].__setitem__("cpu", True),
     "items[0].spec.containers[0].resources.limits.cpu: not a Kubernetes CPU quantity: true (true and false are never"),
    (lambda p: p["spec"].__setitem__("nodeName", [1]), "items[0].spec.nodeName: expected a string, got a list"),
    # a terminal escape in a name is blamed where it is, not on the scenario field it would land in
    (lambda p: p["spec"].__setitem__("nodeName", "node\x1b[2J"), "items[0].spec.nodeName: contains the control character"),
    (lambda p: p["metadata"].__setitem__("ownerReferences", {"a": 1}),
     "items[0].metadata.ownerReferences: expected a list, got an object"),
    (lambda p: p["metadata"].__setitem__("ownerReferences", [{"name": [1]}]),
     "items[0].metadata.ownerReferences[0].name: expected a string, got a list"),
])
def test_wrong_shapes_inside_a_pod_are_refused(tmp_path, capsys, edit, words):
    assert words in _refused(tmp_path, capsys, _edited_pods(tmp_path, edit))


def test_a_null_cpu_is_a_missing_one(tmp_path, capsys):
    def edit(pod):  # a memory request and no CPU request (this was a KeyError)
        for c in pod["spec"]["containers"]:
            c["resources"] = {"limits": {"cpu": None, "memory": "1Gi"}, "requests": {"cpu": None, "memory": "1Gi"}}
    out = tmp_path / "o.yaml"
    assert main(["k8s", "import", str(_edited_pods(tmp_path, edit)), "--machine", "cascadelake-8280",
                 "-o", str(out)]) == 0
    edited = [p for p in yaml.safe_load(out.read_text())["pods"] if p["replicas"] == 1 and p["name"].startswith("checkout")]
    assert len(edited) == 1 and edited[0]["requests"] == {"memory": "2GiB"} and "cpu_limit" not in edited[0]


@pytest.mark.parametrize("config, words", [
    ("reservedMemory: [1, {numaNode: abc, limits: 5}]\n", "reservedMemory[0]: expected a mapping"),
    ("reservedMemory: [{numaNode: abc, limits: {memory: 1Gi}}]\n",
     "reservedMemory[0].numaNode: expected a NUMA node number, got 'abc'"),
    ("reservedMemory: [{numaNode: 0, limits: 5}]\n", "reservedMemory[0].limits: expected a mapping"),
    ("reservedMemory: x\n", "reservedMemory: expected a list"),
    ("reservedMemory: [{numaNode: 99, limits: {memory: 1Gi}}]\n",
     "reservedMemory[0].numaNode: node 99 is not on the machine, which has nodes 0-1"),
    ("kubeReserved: x\n", "kubeReserved: expected a mapping"),
    ("systemReserved: [1]\n", "systemReserved: expected a mapping"),
    ("kubeReserved: {cpu: true}\n", "kubeReserved.cpu: not a Kubernetes CPU quantity: true"),
    ("cpuCFSQuota: maybe\n", "cpuCFSQuota: expected true or false, got 'maybe'"),
    ("cpuManagerPolicy: [static]\n", "cpuManagerPolicy: ['static'] is not one of none, static"),
])
def test_wrong_shapes_in_the_kubelet_configuration_are_refused(tmp_path, capsys, config, words):
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text("kind: KubeletConfiguration\n" + config)
    err = _refused(tmp_path, capsys, K8S / "pods.json", "--kubelet-config", str(cfg))
    assert f"{cfg}: {words}" in err


def test_an_integer_too_long_to_convert_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "pods.json"
    bad.write_text('{"kind": "List", "items": [], "x": ' + "9" * 100_000 + "}")
    out = tmp_path / "o.yaml"
    code = main(["k8s", "import", str(bad), "--machine", "cascadelake-8280", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "not the JSON of kubectl get pods -o json" in err and "Traceback" not in err
    assert not out.exists()


def test_pods_not_bound_to_a_node_are_left_out_or_imported_together(tmp_path, capsys):
    data = json.loads((K8S / "pods.json").read_text())
    data["items"][0]["spec"]["nodeName"] = None  # a Pending pod the scheduler has not bound yet
    src = tmp_path / "pods.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "o.yaml"
    assert main(["k8s", "import", str(src), "--machine", "cascadelake-8280", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    sc = yaml.safe_load(out.read_text())
    assert sc["name"] == "worker-1" and "1 pods are not bound to a node yet" in err and "pods run on 2 nodes" in err
    for pod in data["items"]:
        pod["spec"].pop("nodeName", None)  # a manifest: nothing bound
    src.write_text(json.dumps(data))
    out.unlink()
    assert main(["k8s", "import", str(src), "--machine", "cascadelake-8280", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    sc = yaml.safe_load(out.read_text())
    assert sc["name"] == "unscheduled" and "no pod is bound to a node" in err and "None" not in out.read_text()


def test_a_bare_pod_named_like_a_replica_is_renamed_and_the_kubelet_file_is_named(tmp_path, capsys):
    data = json.loads((K8S / "pods.json").read_text())
    bare = json.loads(json.dumps(data["items"][0]))
    bare["metadata"]["name"] = "checkout-7d9f8c6b5-1"  # replica 1 of the 3-pod ReplicaSet group runs under this name
    bare["metadata"].pop("ownerReferences")
    bare["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "1"
    data["items"].append(bare)
    src = tmp_path / "pods.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "o.yaml"
    code = main(["k8s", "import", str(src), "--machine", "cascadelake-8280", "-o", str(out),
                 "--kubelet-config", str(K8S / "kubelet-config.yaml")])
    err = capsys.readouterr().err
    assert code == 0, err
    sc = yaml.safe_load(out.read_text())
    names = [p["name"] for p in sc["pods"]]
    assert "checkout-7d9f8c6b5" in names and "checkout-7d9f8c6b5-1-g2" in names
    assert sc["description"] == "pods of node worker-1 from pods.json with the kubelet configuration kubelet-config.yaml"


def _one_owner_many_sizes(tmp_path, n: int) -> Path:
    """``n`` pods of one ReplicaSet, each with its own CPU limit (as a VPA leaves them)."""
    data = json.loads((K8S / "pods.json").read_text())
    first = data["items"][0]
    data["items"] = []
    for k in range(n):
        pod = json.loads(json.dumps(first))
        pod["metadata"]["name"] = f"w-{k}"
        _container(pod)["resources"]["limits"]["cpu"] = f"{100 + k}m"
        data["items"].append(pod)
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(data))
    return path


def test_groups_of_one_owner_are_numbered_not_grown(tmp_path, capsys):
    out = tmp_path / "o.yaml"
    code = main(["k8s", "import", str(_one_owner_many_sizes(tmp_path, 30)), "--machine", "cascadelake-8280",
                 "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    names = [p["name"] for p in yaml.safe_load(out.read_text())["pods"]]
    assert names == ["checkout-7d9f8c6b5"] + [f"checkout-7d9f8c6b5-g{k}" for k in range(2, 31)]


def test_an_import_too_large_to_read_back_is_refused_unwritten(tmp_path, capsys, monkeypatch):
    import numasim.cli_tools as tools

    monkeypatch.setattr(tools, "MAX_BYTES", 4000)
    err = _refused(tmp_path, capsys, _one_owner_many_sizes(tmp_path, 40))
    assert "pod groups), over the 4,000 bytes numasim reads" in err


def test_an_import_with_more_values_than_numasim_reads_back_is_refused_unwritten(tmp_path, capsys, monkeypatch):
    import numasim.model.yamlfile as yf

    monkeypatch.setattr(yf, "MAX_NODES", 300)
    err = _refused(tmp_path, capsys, _one_owner_many_sizes(tmp_path, 40))
    assert "would be refused when read back (" in err and "more than 300 values" in err


def test_a_pod_list_of_too_many_objects_is_refused_before_it_is_parsed(tmp_path, capsys):
    # 64 MiB of "{}," parsed took 4 GB and 100 s; counted first, the refusal names the file and the limit.
    pods = tmp_path / "many.json"
    pods.write_text('{"items": [' + "{}," * 1_000_000 + "{}]}")  # k8s.MAX_PODS_CONTAINERS objects and 3 more
    err = _refused(tmp_path, capsys, pods)
    assert "many.json: holds 1,000,003 JSON objects and lists" in err and "more than the 1,000,000 numasim reads" in err


def test_a_pod_list_of_too_many_values_is_refused_before_it_is_parsed(tmp_path, capsys):
    pods = tmp_path / "many.json"
    pods.write_text('{"items": [' + "1," * 4_000_001 + "1]}")  # one comma more than k8s.MAX_PODS_VALUES
    err = _refused(tmp_path, capsys, pods)
    assert "many.json: holds 4,000,001 values (counting commas), more than the 4,000,000 numasim reads" in err
