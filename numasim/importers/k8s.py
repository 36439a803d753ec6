"""``numasim k8s import``: a scenario from a node's pods and its kubelet configuration.

Reads ``kubectl get pods -o json`` (a pod list, or one pod) and, optionally, the
node's kubelet configuration file (a ``KubeletConfiguration``: cpuManagerPolicy,
topologyManagerPolicy and scope, memoryManagerPolicy, reservedSystemCPUs,
reservedMemory, kubeReserved/systemReserved CPU, cpuCFSQuota). Pods of one owner
(a ReplicaSet, a StatefulSet) with the same resources become one pod group with
``replicas``. What Kubernetes does not know (how many threads are busy, what they do
with memory) is guessed, said in the scenario's comments and warned about: threads
= the CPU limit (else the request) rounded up, the memory touched = the memory limit
(else the request), the workload = ``--profile``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import Problem, ScenarioError
from ..units import format_exact_size, parse_cpu

__all__ = ["import_k8s", "MAX_PODS_BYTES", "MAX_PODS_CONTAINERS", "MAX_PODS_VALUES"]

MAX_PODS_BYTES = 64 * 2**20
# Counted in the text before it is parsed (as numasim.analysis.results does for results files): parsed,
# a value takes 8-30 times its text and an empty object 64 bytes for its 3 ("{},"), so 64 MiB of "{},"
# took 4 GB and 100 s. kubectl's JSON of a pod (about 5 KB) holds about 50-100 objects and lists and
# 200-400 values (commas in its strings, such as a last-applied-configuration annotation, count too):
# these allow about 10,000 pods, what MAX_PODS_BYTES holds. The worst shape measured, 1,000,000 objects
# of 4 short strings each (38 MB), parses to about 450 MB: the import stays under 0.75 GB in all, 7 s.
MAX_PODS_CONTAINERS = 1_000_000  # JSON objects and lists ('{' and '[', inside strings too)
MAX_PODS_VALUES = 4_000_000  # values (','), inside strings too
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def _error(source: str, path: str, message: str) -> ScenarioError:
    return ScenarioError(Problem(path, message), source=source)


def _bytes(q: Any, source: str, path: str) -> int:
    """A Kubernetes memory quantity ('4Gi', '512M', '1073741824', '1e9') in bytes."""
    from ..units import parse_size

    text = str(q).strip()
    try:
        if re.fullmatch(r"[0-9]+(\.[0-9]+)?([eE][0-9]+)?", text):
            return int(float(text))
        return int(parse_size(text))
    except (ValueError, OverflowError):
        raise _error(source, path, f"not a Kubernetes memory quantity: {text[:40]!r}") from None


def _mapping(value: Any, source: str, path: str, what: str = "an object") -> dict:
    """``value`` if it is a JSON object (a YAML mapping); a missing or null one is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _error(source, path, f"expected {what}, got {_kind(value)}")
    return value


def _text(value: Any, source: str, path: str) -> str | None:
    """A name (a string) or None when it is missing."""
    if value is not None and not isinstance(value, str):
        raise _error(source, path, f"expected a string, got {_kind(value)}")
    if value is not None:
        from ..model.spec import _printable

        try:  # blamed here, not on the imported scenario's field it would end up in
            _printable(value)
        except ValueError as exc:
            raise _error(source, path, str(exc)) from None
    return value


def _kind(value: Any) -> str:
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _cpu(q: Any, source: str, path: str) -> float:
    if isinstance(q, bool):
        raise _error(source, path, f"not a Kubernetes CPU quantity: {str(q).lower()} (true and false are never numbers); "
                                   "expected a number of CPUs such as 2, \"1.5\" or \"500m\"")
    try:
        return float(parse_cpu(q))
    except (ValueError, TypeError):
        raise _error(source, path, f"not a Kubernetes CPU quantity: {str(q)[:40]!r}") from None


def _read_json(path: str) -> Any:
    p = Path(path)
    try:
        if not p.is_file():
            raise _error(path, "", "not a regular file")
        if p.stat().st_size > MAX_PODS_BYTES:
            raise _error(path, "", f"larger than {MAX_PODS_BYTES // 2**20} MiB")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise _error(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # bad UTF-8
        raise _error(path, "", f"not the JSON of kubectl get pods -o json: {str(exc)[:200]}") from None
    one_node = "export the pods of one node: kubectl get pods -A -o json --field-selector spec.nodeName=NODE"
    if (n := text.count("{") + text.count("[")) > MAX_PODS_CONTAINERS:
        raise _error(path, "", f"holds {n:,} JSON objects and lists (counting '{{' and '['), more than the "
                               f"{MAX_PODS_CONTAINERS:,} numasim reads (kubectl writes about 100 a pod); {one_node}")
    if (n := text.count(",")) > MAX_PODS_VALUES:
        raise _error(path, "", f"holds {n:,} values (counting commas), more than the {MAX_PODS_VALUES:,} numasim "
                               f"reads (kubectl writes a few hundred a pod); {one_node}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # malformed JSON, an integer of over 4,300 digits
        raise _error(path, "", f"not the JSON of kubectl get pods -o json: {str(exc)[:200]}") from None


def _pod_resources(pod: dict, source: str, where: str) -> dict[str, Any]:
    """Sums over the pod's containers: limits count only when every container has one."""
    containers = _mapping(pod.get("spec"), source, f"{where}.spec").get("containers") or []
    if not isinstance(containers, list) or not containers:
        raise _error(source, f"{where}.spec.containers", "a pod needs at least one container")
    out: dict[str, Any] = {}
    for kind in ("limits", "requests"):
        for res, conv in (("cpu", _cpu), ("memory", _bytes)):
            vals = []
            for k, c in enumerate(containers):
                at = f"{where}.spec.containers[{k}]"
                resources = _mapping(_mapping(c, source, at).get("resources"), source, f"{at}.resources")
                q = _mapping(resources.get(kind), source, f"{at}.resources.{kind}").get(res)
                vals.append(None if q is None else conv(q, source, f"{at}.resources.{kind}.{res}"))
            if kind == "limits":
                out[f"{kind}_{res}"] = sum(vals) if all(v is not None for v in vals) else None
            else:
                out[f"{kind}_{res}"] = sum(v for v in vals if v is not None) if any(v is not None for v in vals) else None
    # Kubernetes defaults a missing request to the limit.
    for res in ("cpu", "memory"):
        if out[f"requests_{res}"] is None:
            out[f"requests_{res}"] = out[f"limits_{res}"]
    return out


def _machine_nodes(machine: Any) -> int | None:
    """The NUMA nodes (memory-only ones too) of ``machine``, a preset name or a machine file's data;
    None when it is not a valid machine (the scenario's own check then says why)."""
    from ..model.machine import MachineSpec
    from ..model.presets import load_preset

    try:
        data = load_preset("machines", machine) if isinstance(machine, str) else dict(machine)
        if isinstance(data.get("preset"), str):
            data = load_preset("machines", data.pop("preset")) | data
        spec = MachineSpec.model_validate(data)
    except Exception:  # noqa: BLE001 - any problem is reported by the scenario check
        return None
    return spec.n_nodes + len(spec.memory_nodes)


def _kubelet_options(path: str, nodes: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """The kubelet options of the KubeletConfiguration file ``path``; ``nodes``: the machine's NUMA nodes."""
    from ..model.yamlfile import read_yaml

    data = read_yaml(Path(path))
    if not isinstance(data, dict):
        raise _error(path, "", "not a KubeletConfiguration (a mapping of keys)")
    opts: dict[str, Any] = {}
    notes: list[str] = []
    names = {"cpuManagerPolicy": ("cpu_manager_policy", {"none", "static"}),
             "topologyManagerPolicy": ("topology_manager_policy", {"none", "best-effort", "restricted", "single-numa-node"}),
             "topologyManagerScope": ("topology_manager_scope", {"container", "pod"}),
             "memoryManagerPolicy": ("memory_manager_policy", {"None", "Static"})}
    for key, (opt, allowed) in names.items():
        if key in data:
            if not isinstance(data[key], str) or data[key] not in allowed:
                raise _error(path, key, f"{data[key]!r} is not one of {', '.join(sorted(allowed))}")
            opts[opt] = data[key]
    if "reservedSystemCPUs" in data:
        opts["reserved_cpus"] = str(data["reservedSystemCPUs"])
    else:
        reserved = [_mapping(data.get(k), path, k, "a mapping such as {cpu: 500m, memory: 1Gi}").get("cpu")
                    for k in ("kubeReserved", "systemReserved")]
        cpus = sum(_cpu(q, path, f"{k}.cpu") for k, q in zip(("kubeReserved", "systemReserved"), reserved)
                   if q is not None)
        if cpus:
            opts["reserved_cpus"] = math.ceil(cpus)  # the CPU manager reserves ceil(kube + system reserved) CPUs
    rm = data.get("reservedMemory")
    if rm is not None and not isinstance(rm, list):
        raise _error(path, "reservedMemory", f"expected a list such as [{{numaNode: 0, limits: {{memory: 1Gi}}}}], "
                                             f"got {_kind(rm)}")
    if rm:
        sizes = set()
        for k, e in enumerate(rm):
            e = _mapping(e, path, f"reservedMemory[{k}]", "a mapping such as {numaNode: 0, limits: {memory: 1Gi}}")
            node = e.get("numaNode")
            if isinstance(node, bool) or not isinstance(node, int) or node < 0:
                raise _error(path, f"reservedMemory[{k}].numaNode", f"expected a NUMA node number, got {node!r}")
            if nodes is not None and node >= nodes:
                raise _error(path, f"reservedMemory[{k}].numaNode",
                             f"node {node} is not on the machine, which has nodes 0-{nodes - 1}")
            limits = _mapping(e.get("limits"), path, f"reservedMemory[{k}].limits", "a mapping such as {memory: 1Gi}")
            sizes.add(_bytes(limits.get("memory", 0), path, f"reservedMemory[{k}].limits.memory"))
        opts["reserved_memory"] = format_exact_size(max(sizes))
        if len(sizes) > 1:
            notes.append("reservedMemory differs between NUMA nodes; numasim reserves the largest on every node")
    if "cpuCFSQuota" in data:
        if not isinstance(data["cpuCFSQuota"], bool):
            raise _error(path, "cpuCFSQuota", f"expected true or false, got {data['cpuCFSQuota']!r}")
        opts["cfs_quota"] = data["cpuCFSQuota"]
    return opts, notes


def import_k8s(pods_path: str, kubelet_path: str | None, machine: Any, node: str | None = None,
               profile: str = "java-transactions",
               exclude_namespaces: tuple[str, ...] = ("kube-system",)) -> tuple[dict[str, Any], list[str]]:
    """A scenario (plain data) for the pods of one node; also return the warnings."""
    data = _read_json(pods_path)
    items = data.get("items") if isinstance(data, dict) and "items" in data else [data]
    if not isinstance(items, list):
        raise _error(pods_path, "items", "expected a list of pods")
    warnings: list[str] = []
    pods = []
    for k, pod in enumerate(items):
        if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
            raise _error(pods_path, f"items[{k}]", "not a Pod")
        meta = _mapping(pod.get("metadata"), pods_path, f"items[{k}].metadata")
        spec = _mapping(pod.get("spec"), pods_path, f"items[{k}].spec")
        status = _mapping(pod.get("status"), pods_path, f"items[{k}].status")
        for value, path in ((meta.get("name"), "metadata.name"), (meta.get("namespace"), "metadata.namespace"),
                            (spec.get("nodeName"), "spec.nodeName"), (status.get("phase"), "status.phase")):
            _text(value, pods_path, f"items[{k}].{path}")
        if status.get("phase", "Running") not in ("Running", "Pending"):
            continue
        if meta.get("namespace") in exclude_namespaces:
            continue
        pods.append((k, pod))
    nodes = Counter((p.get("spec") or {}).get("nodeName") for _, p in pods)
    if node is None:
        if not nodes:
            raise _error(pods_path, "", "no running or pending pods (outside the excluded namespaces)")
        node = nodes.most_common(1)[0][0]
        if node is None:  # not bound yet (Pending): unless no pod is, take the busiest node
            node = max((n for n in nodes if n is not None), key=lambda n: nodes[n], default=None)
        if None in nodes:
            if node is None:
                warnings.append(f"no pod is bound to a node (spec.nodeName); importing all {nodes[None]} as one node")
            else:
                warnings.append(f"{nodes[None]} pods are not bound to a node yet (no spec.nodeName) and are left out")
        if (n_bound := len(nodes) - (None in nodes)) > 1:
            warnings.append(f"pods run on {n_bound} nodes; importing node {node!r} ({nodes[node]} pods); "
                            "choose another with --node")
    elif node not in nodes:
        raise _error(pods_path, "--node", f"no pods on node {node!r}; nodes: {', '.join(sorted(str(n) for n in nodes if n is not None))}")
    groups: dict[tuple, dict[str, Any]] = {}
    for k, pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        meta = pod.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        if not isinstance(owners, list):
            raise _error(pods_path, f"items[{k}].metadata.ownerReferences", f"expected a list, got {_kind(owners)}")
        owner = _mapping(owners[0], pods_path, f"items[{k}].metadata.ownerReferences[0]") if owners else {}
        base = (_text(owner.get("name"), pods_path, f"items[{k}].metadata.ownerReferences[0].name")
                or meta.get("name") or f"pod{k}")
        res = _pod_resources(pod, pods_path, f"items[{k}]")
        key = (base, tuple(sorted(res.items())))
        if key in groups:
            groups[key]["replicas"] += 1
        else:
            groups[key] = {"base": str(base), "res": res, "replicas": 1}
    out_pods = []
    names: set[str] = set()  # the groups' names, and the names their pods run under
    used: set[str] = set()
    tried: dict[str, int] = {}  # per name, the last group number tried: each is tried once
    for g in groups.values():
        res = g["res"]
        base = _NAME.sub("-", g["base"]).strip("-.")[:60] or "pod"

        def instances(n: str) -> list[str]:  # the names its replicas run under (runner.py)
            return [n] if g["replicas"] == 1 else [f"{n}-{r}" for r in range(g["replicas"])]

        name = base
        while name in names or any(x in used for x in instances(name)):
            # Pods of one owner with different resources (a VPA's): web, web-g2, web-g3, ...
            tried[base] = tried.get(base, 1) + 1
            name = f"{base}-g{tried[base]}"
        names.add(name)
        used.update(instances(name))
        cpus = res["limits_cpu"] or res["requests_cpu"]
        mem = res["limits_memory"] or res["requests_memory"]
        spec: dict[str, Any] = {"name": name, "replicas": g["replicas"], "threads": max(1, math.ceil(cpus or 1)),
                                "memory": format_exact_size(mem) if mem else "1GiB", "profile": profile}
        if res["limits_cpu"] is not None:
            spec["cpu_limit"] = res["limits_cpu"]
        req = {k: v for k, v in (("cpu", res["requests_cpu"]), ("memory", res["requests_memory"])) if v is not None}
        if req:
            spec["requests"] = ({"cpu": req["cpu"]} if "cpu" in req else {}) | (
                {"memory": format_exact_size(req["memory"])} if "memory" in req else {})
        if not mem:
            warnings.append(f"pod {name}: no memory request or limit; it touches 1 GiB (guessed)")
        out_pods.append(spec)
    if not out_pods:
        raise _error(pods_path, "", f"no pods on node {node!r}")
    warnings.append(f"every pod runs the {profile!r} workload with as many busy threads as its CPU limit (else "
                    "request) rounded up, touching its memory limit (else request): guessed, Kubernetes does not "
                    "know; edit the scenario's pods and workloads")
    options: dict[str, Any] = {}
    if kubelet_path:
        options, notes = _kubelet_options(kubelet_path, _machine_nodes(machine))
        warnings += notes
    scenario = {
        "name": _NAME.sub("-", str(node if node is not None else "unscheduled"))[:80] or "node",
        "description": (f"pods of node {node} from {Path(pods_path).name}" if node is not None
                        else f"pods not bound to a node, from {Path(pods_path).name}")
                       + (f" with the kubelet configuration {Path(kubelet_path).name}" if kubelet_path else ""),
        "machine": machine,
        "pods": out_pods,
        "duration": "30s",
        "warmup": "10s",
        "policies": [
            {"label": "default-kubelet", "policy": "k8s"},
            {"label": "kubelet", "policy": "k8s", "options": options},
        ],
        "baseline": "default-kubelet",
    }
    return scenario, warnings
