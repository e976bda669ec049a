"""What the per-node check of a container job recorded (`out/TASK.runtime`: `key<TAB>value` lines, one
block per node, each starting with `node`), turned into the facts stored with every result of the job."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runner.backends.containers.base import Runtime

# The facts that say which runtime and which image ran: the nodes of one job must agree on them.
IDENTITY = ("runtime_version", "image_id", "repo_digest", "image_sha256", "image_changed")


def read(path: Path) -> list[dict[str, str]]:
    """One dict per node, in the order the nodes wrote them; [] when the check left nothing."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    nodes: list[dict[str, str]] = []
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if not sep:
            continue
        if key == "node" or not nodes:
            nodes.append({})
        nodes[-1].setdefault(key, value.strip())
    return nodes


def errors(nodes: list[dict[str, str]]) -> list[str]:
    """The check's reasons, each once, naming the nodes where it held: 'node1, node2: image ... does not exist'."""
    by_reason: dict[str, list[str]] = {}
    for n in nodes:
        if n.get("error"):
            by_reason.setdefault(n["error"], []).append(n.get("node", "?"))
    return [f"{', '.join(where)}: {reason}" for reason, where in by_reason.items()]


def extra(runtime: Runtime, nodes: list[dict[str, str]]) -> dict[str, Any]:
    """The runtime and image facts of a result: the first node's, and every node's when they differ."""
    spec = runtime.spec
    out: dict[str, Any] = {"container": runtime.name, "container_runtime": runtime.name, "image": spec.image}
    if not nodes:
        return out
    first = nodes[0]
    if first.get("runtime_version"):
        out["container_runtime_version"] = version_number(first["runtime_version"])
    if first.get("image_id"):
        out["image_id"] = _sha(first["image_id"])
    elif first.get("image_sha256"):
        out["image_id"] = _sha(first["image_sha256"])
        out["image_id_of"] = first.get("image_hash_of") or "file"
    if first.get("repo_digest") and first["repo_digest"] not in ("<none>", ""):
        out["repo_digest"] = first["repo_digest"]
    for key in ("image_reference", "image_changed", "image_identity"):
        if first.get(key):
            out[key] = first[key]
    out["container_nodes"] = [n.get("node", "?") for n in nodes]
    seen = {tuple(n.get(k, "") for k in IDENTITY) for n in nodes}
    if len(seen) > 1:
        out["container_nodes_differ"] = {n.get("node", "?"): {k: n[k] for k in IDENTITY if n.get(k)} for n in nodes}
    return out


def version_number(said: str) -> str:
    """'podman version 4.3.1' -> '4.3.1'; what the runtime said when it names no version number."""
    found = re.search(r"\d+(?:\.\d+)+[^\s,;)]*", said)
    return found.group(0) if found else said


def _sha(value: str) -> str:
    value = value.strip()
    return value if ":" in value else f"sha256:{value}"
