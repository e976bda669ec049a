"""What differs between two environments, from what their repeats recorded: versions (PyTorch, CUDA, cuDNN, NCCL,
Python, numpy, the OS, the C library), the image, the hardware, the variables that steer the libraries, torch's
build (oneDNN, BLAS, CPU capability), how each precision ran, and the installed packages (Python distributions
and the image's dpkg or conda packages, from the store's captures).

`side` picks what an environment turned out to be from its stored rows; `diff` compares two sides. `matrix diff`
and `matrix bisect` print it (runner/report/diff.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.analysis.recipes import recipe, recipe_text
from runner.record.stored import StoredRepeat

# Scalar facts of a result's env, in the order a reader looks for them, with how to name them.
FIELDS: tuple[tuple[str, str], ...] = (
    ("torch", "PyTorch"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("nccl", "NCCL"), ("python", "Python"),
    ("numpy", "numpy"), ("torchvision", "torchvision"), ("apex", "apex"), ("os", "OS"), ("libc", "C library"),
    ("platform", "platform"), ("image", "image"), ("image_id", "image id"), ("repo_digest", "image digest"),
    ("container", "container"), ("device_name", "device"), ("capability", "compute capability"),
    ("driver", "GPU driver"), ("cpu", "CPU"), ("cpu_count", "CPUs"), ("cpu_capability", "CPU capability"),
    ("torch_threads", "torch threads"), ("hostname", "host"), ("workload_argv", "program's command"),
)
# What matters for speed among system packages: shown first and by default (the others are counted).
RELEVANT_PACKAGE = re.compile(
    r"torch|cuda|cudnn|nccl|cublas|dnnl|onednn|mkl|openblas|blas|lapack|gomp|libomp|libstdc\+\+|^gcc|^libc6$|"
    r"^python3(\.\d+)?(-minimal)?$|^libpython|numpy|nvidia|tensorrt|triton|sleef|fbgemm|xnnpack|nnpack|eigen|"
    r"protobuf|^libgfortran")
# Lines of torch.__config__.show() worth comparing: (label, pattern of the line, group holding the value).
_CONFIG_LINES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("compiler", re.compile(r"^\s*-\s*((?:GCC|gcc|clang|Clang|MSVC)\s*\S+)")),
    ("oneDNN", re.compile(r"(?:MKL-DNN|oneDNN|mkldnn)\s+(v?[\d.]+[^\s(]*)", re.I)),
    ("MKL", re.compile(r"Math Kernel Library Version\s+(\S+)")),
    ("OpenMP", re.compile(r"OpenMP\s+(\d+)")),
    ("CPU capability (build)", re.compile(r"CPU capability usage:\s*(\S+)")),
    ("CUDA runtime (build)", re.compile(r"CUDA Runtime\s+(\S+)")),
    ("cuDNN (build)", re.compile(r"CuDNN\s+(\S+)")),
)
_CONFIG_SETTINGS = re.compile(r"^(?:USE_\w+|\w+_INFO|BLAS|BUILD_TYPE|CUDA_VERSION|CUDNN_VERSION|TORCH_VERSION|"
                              r"PERF_WITH_\w+)$")


@dataclass(frozen=True)
class EnvSide:
    """What one environment turned out to be: its newest repeat that captured an environment, and that repeat's
    software capture (None when stored before matrix kept them). `precisions`: how each precision ran, in words."""

    name: str
    env: dict[str, Any]
    capture: dict[str, Any] | None
    precisions: dict[str, str] = field(default_factory=dict)
    run_id: str = ""
    started_at: float | None = None
    cell_key: str = ""
    rows: int = 0

    def version_line(self, other: EnvSide | None = None) -> str:
        """'PyTorch 1.7.0a0, Python 3.9.2, ...' (only what differs from `other` when given)."""
        parts = []
        for key, label in FIELDS[:10]:
            value = _text(self.env.get(key))
            if value and (other is None or value != _text(other.env.get(key))):
                parts.append(f"{label} {value}")
        return ", ".join(parts)


@dataclass(frozen=True)
class EnvChange:
    """One thing that differs (or not): its name, and its value on A and on B ('' when absent)."""

    label: str
    a: str
    b: str

    @property
    def differs(self) -> bool:
        return self.a != self.b


@dataclass(frozen=True)
class Packages:
    """Two package lists compared: changed (name, A's version, B's), added on B, removed from A."""

    kind: str
    changed: list[tuple[str, str, str]]
    added: list[tuple[str, str]]
    removed: list[tuple[str, str]]
    same: int
    captured: tuple[bool, bool]

    @property
    def empty(self) -> bool:
        return not (self.changed or self.added or self.removed)

    def counts_text(self) -> str:
        return (f"{len(self.changed)} changed, {len(self.added)} added, {len(self.removed)} removed, "
                f"{self.same} the same")


@dataclass
class EnvDiff:
    a: EnvSide
    b: EnvSide
    facts: list[EnvChange]
    env_vars: list[EnvChange]
    build: list[EnvChange]
    precision: list[EnvChange]
    packages: list[Packages]
    notes: list[str]

    @property
    def differing(self) -> list[EnvChange]:
        return [c for c in self.facts if c.differs]


def _text(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _bench_ran(repeat: StoredRepeat) -> bool:
    return "torch" in repeat.env or "python" in repeat.env


def side(name: str, rows: Iterable[StoredRepeat], captures: Mapping[str, dict[str, Any]]) -> EnvSide:
    """An environment as its newest repeat that ran the benchmark recorded it (the newest row with an env capture;
    a capture stored with it when the store has one), with how each precision ran in its newest rows."""
    rows = sorted(rows, key=lambda r: r.id)
    ran = [r for r in rows if _bench_ran(r)]
    newest = ran[-1] if ran else (rows[-1] if rows else None)
    with_capture = [r for r in ran if r.capture_id in captures]
    chosen_capture = captures.get(str(with_capture[-1].capture_id)) if with_capture else None
    precisions: dict[str, str] = {}
    for r in ran:
        record = (r.raw or {}).get("precision")
        if record is None:
            record = r.env.get("precision_flags")
        words = recipe_text(recipe(record, str(r.params.get("precision", ""))))
        if words:
            precisions[str(r.params.get("precision", ""))] = words
    if newest is None:
        return EnvSide(name, {}, chosen_capture, precisions, "", None, "", len(rows))
    return EnvSide(name, dict(newest.env), chosen_capture, precisions, newest.run_id, newest.started_at,
                newest.cell_key, len(rows))


def _labels(env: Mapping[str, Any]) -> dict[str, str]:
    labels = env.get("image_labels")
    return {f"label {k}": _text(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def build_facts(config: str | None) -> dict[str, str]:
    """The comparable facts of torch.__config__.show(): compiler, oneDNN, MKL, OpenMP, the CPU capability it was
    built for, CUDA and cuDNN it was built with, and the build settings that say which libraries it uses."""
    found: dict[str, str] = {}
    if not config:
        return found
    for line in config.splitlines():
        for label, pattern in _CONFIG_LINES:
            m = pattern.search(line)
            if m and label not in found:
                found[label] = m.group(1).rstrip(",")
        if "Build settings:" in line:
            for item in line.split("Build settings:", 1)[1].split(", "):
                key, sep, value = item.strip().partition("=")
                if sep and _CONFIG_SETTINGS.match(key):
                    found[key] = value.strip().rstrip(",")
    return found


def compare_packages(kind: str, a: Mapping[str, str] | None, b: Mapping[str, str] | None) -> Packages:
    a_, b_ = dict(a or {}), dict(b or {})
    changed = sorted((k, a_[k], b_[k]) for k in a_.keys() & b_.keys() if a_[k] != b_[k])
    added = sorted((k, b_[k]) for k in b_.keys() - a_.keys())
    removed = sorted((k, a_[k]) for k in a_.keys() - b_.keys())
    same = sum(1 for k in a_.keys() & b_.keys() if a_[k] == b_[k])
    return Packages(kind, changed, added, removed, same, (a is not None, b is not None))


def _pairs(a: Mapping[str, str], b: Mapping[str, str]) -> list[EnvChange]:
    return [EnvChange(k, a.get(k, ""), b.get(k, "")) for k in sorted(a.keys() | b.keys())]


def diff(a: EnvSide, b: EnvSide) -> EnvDiff:
    """Everything A and B recorded, compared; `facts` holds every scalar field either side has (`differing` the
    ones that differ), the rest only what differs."""
    # A container's hostname is its id, new for every container: not a difference between environments.
    both_contained = bool(a.env.get("container")) and bool(b.env.get("container"))
    facts = [EnvChange(label, _text(a.env.get(key)), _text(b.env.get(key))) for key, label in FIELDS
             if (_text(a.env.get(key)) or _text(b.env.get(key))) and not (key == "hostname" and both_contained)]
    facts += [c for c in _pairs(_labels(a.env), _labels(b.env))]
    ca, cb = a.capture or {}, b.capture or {}
    vars_a = {**{k: _text(v) for k, v in (a.env.get("env_vars") or {}).items()},
              **{k: _text(v) for k, v in (ca.get("env_vars") or {}).items()}}
    vars_b = {**{k: _text(v) for k, v in (b.env.get("env_vars") or {}).items()},
              **{k: _text(v) for k, v in (cb.get("env_vars") or {}).items()}}
    env_vars = [c for c in _pairs(vars_a, vars_b) if c.differs]
    # A build setting one release prints and the other does not is a difference only when it is switched on.
    build = [c for c in _pairs(build_facts(ca.get("torch_config")), build_facts(cb.get("torch_config")))
             if c.differs and (c.a and c.b or (c.a or c.b) not in ("OFF", "0"))]
    precision = [EnvChange(p, a.precisions.get(p, ""), b.precisions.get(p, ""))
                 for p in sorted(a.precisions.keys() & b.precisions.keys()) if a.precisions[p] != b.precisions[p]]
    packages = [compare_packages("Python packages", ca.get("python_packages") if a.capture else None,
                                 cb.get("python_packages") if b.capture else None)]
    for kind, label in (("dpkg", "system packages (dpkg)"), ("conda", "conda packages")):
        if kind in ca or kind in cb:
            packages.append(compare_packages(label, ca.get(kind), cb.get(kind)))
    notes = []
    for s in (a, b):
        if s.capture is None:
            notes.append(f"{s.name}: no package capture in the store (stored before matrix kept them, or no repeat "
                         "ran the benchmark): packages, steering variables and torch's build are not compared")
        elif "error" in s.capture:
            notes.append(f"{s.name}: the package capture failed there: {s.capture['error']}")
    return EnvDiff(a, b, facts, env_vars, build, precision, packages, notes)


def relevant_first(names: Iterable[str]) -> list[str]:
    """Package names with the ones that matter for speed (RELEVANT_PACKAGE) first, each part sorted."""
    names = sorted(names)
    return [n for n in names if RELEVANT_PACKAGE.search(n)] + [n for n in names if not RELEVANT_PACKAGE.search(n)]


def to_json(d: EnvDiff) -> dict[str, Any]:
    """The difference as a JSON-ready document (every package, not only the relevant ones)."""
    def side_doc(s: EnvSide) -> dict[str, Any]:
        return {"name": s.name, "run_id": s.run_id, "started_at": s.started_at, "cell_key": s.cell_key,
                "rows": s.rows, "captured": s.capture is not None}

    def changes(items: list[EnvChange]) -> list[dict[str, str]]:
        return [{"what": c.label, "a": c.a, "b": c.b} for c in items]

    return {"a": side_doc(d.a), "b": side_doc(d.b), "differs": changes(d.differing),
            "same": changes([c for c in d.facts if not c.differs]), "env_vars": changes(d.env_vars),
            "build": changes(d.build), "precision": changes(d.precision),
            "packages": [{"kind": p.kind, "captured": list(p.captured),
                          "changed": [{"name": n, "a": va, "b": vb} for n, va, vb in p.changed],
                          "added": [{"name": n, "b": v} for n, v in p.added],
                          "removed": [{"name": n, "a": v} for n, v in p.removed], "same": p.same}
                         for p in d.packages],
            "notes": d.notes}
