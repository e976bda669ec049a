"""What the kit measures: phases of cells in priority order, and the same plan shrunk for a CPU dry run.

A cell here is a mapping of `matrix.yaml` axis values (the kit writes one matrix file per cell, since each
cell gets its own calibrated iteration count). The dry run keeps every phase and table but one or two cells
each, with a tiny model (`mlp`) and batches that a CPU trains in milliseconds, and `amp-bf16` where the
plan says `amp` (a CPU has no FP16 autocast); what a CPU cannot run at all (the manual FP16 recipe, an image
folder without torchvision) stays, and comes back `unsupported`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.contract import PRECISIONS
from runner.spec import stable_hash

Params = dict[str, Any]

# The write-ups' names for apex's optimisation levels, as this project's precisions run them today.
OPT_LEVELS = {
    "O0": {"precision": "fp32"},                                  # pure FP32
    "O1": {"precision": "amp"},                                   # mixed precision: autocast + GradScaler
    "O2": {"precision": "amp", "amp_impl": "manual"},             # FP16 model, FP32 master weights
    "O3": {"precision": "fp16"},                                  # pure FP16
}
MANUAL_2018 = {"precision": "amp", "amp_impl": "manual", "loss_scale": 256.0}  # FP16 + FP32 masters, scale 256


@dataclass(frozen=True)
class Phase:
    """A group of cells measured together (rounds interleave its cells' repeats), in priority order."""

    name: str
    title: str
    cells: tuple[Mapping[str, Any], ...]
    repeats: int
    writeup: str = ""         # the published write-up whose table it fills (published.json)
    reference: bool = False   # the hand-written loop (benchmarks/bench_vs_reference.py), not a matrix
    labels: tuple[Mapping[str, str], ...] = field(default_factory=tuple)  # per cell: its name in the write-up


def cell_id(params: Mapping[str, Any]) -> str:
    """A short stable name for a cell's params (calibration and matrix files are keyed on it)."""
    return stable_hash(dict(sorted(params.items())), 10)


def _cells(common: Mapping[str, Any], *axes: Iterable[Mapping[str, Any]]) -> tuple[Params, ...]:
    out = []
    for combo in itertools.product(*axes):
        p: Params = dict(common)
        for part in combo:
            p.update(part)
        out.append(p)
    return tuple(out)


def _each(key: str, values: Sequence[Any]) -> list[dict[str, Any]]:
    return [{key: v} for v in values]


def build(repeats: int = 5, writeup_repeats: int = 3, dry: bool = False, device: str = "cuda",
          data_dir: str = "") -> list[Phase]:
    """The phases, in the order they run. `dry`: the CPU dry run's tiny version of the same plan (every phase,
    one or two cells each: about fifteen short processes)."""
    dev = "cpu" if dry else device
    base: Params = {"dataset": "synthetic", "device": dev, **({"threads": 1} if dry else {})}
    rn50: Params = {"model": "mlp" if dry else "resnet50", "batch_size": 4 if dry else 256, "cudnn_benchmark": True}
    amp = "amp-bf16" if dry else "amp"

    def pick(full: Sequence[Params], small: Sequence[Params]) -> tuple[Params, ...]:
        return tuple(dict(c) for c in (small if dry else full))

    main = _cells({**base, **rn50}, _each("precision", PRECISIONS), _each("channels_last", [False, True]))
    reference = {**base, **rn50, "precision": amp, "channels_last": True}
    wrn = {"model": "wrn", "wrn_depth": 10 if dry else 28, "wrn_width": 1 if dry else 10, "batch_size": 4 if dry
           else 128, "device": dev, "eval_batches": 1, "dataset": f"imagefolder:{data_dir}",
           **({"threads": 1} if dry else {})}
    phases = [
        Phase("resnet50", f"ResNet-50, synthetic ImageNet-size data, batch {rn50['batch_size']}: every precision x "
              "channels_last, cudnn.benchmark on",
              pick(main, [{**base, **rn50, "precision": "fp32", "channels_last": False}, reference]), repeats),
        Phase("reference", "The hand-written autocast loop on the same model, batch and data "
              "(benchmarks/bench_vs_reference.py), alternating with bench",
              (reference,), repeats, reference=True),
        Phase("recipe-2018", "The 2018 recipe (FP16 model, FP32 master weights, static loss scale 256) beside "
              "native autocast",
              pick(_cells({**base, **rn50, **MANUAL_2018}, _each("channels_last", [False, True])),
                   [{**base, **rn50, **MANUAL_2018, "channels_last": False}]), repeats),
        Phase("resnet50-breakdown", "ResNet-50 amp with --breakdown (forward, backward), batch 64 to 512",
              pick(_cells({**base, **rn50, "precision": amp, "breakdown": True},
                          _each("batch_size", [64, 128, 256, 512])),
                   [{**base, **rn50, "precision": amp, "breakdown": True}]),
              writeup_repeats, writeup="resnet50-throughput"),
        Phase("resnet-ngc-2018", "ResNet-18/50 at batch 128: fp32, the 2018 fp16 recipe (scale 256), autocast",
              pick(_cells({**base, "batch_size": 128}, _each("model", ["resnet18", "resnet50"]),
                          [{"precision": "fp32"}, dict(MANUAL_2018), {"precision": "amp"}]),
                   [{**base, "model": "mlp", "batch_size": 4, "precision": "fp32"},
                    {**base, "model": "mlp", "batch_size": 4, **MANUAL_2018}]),
              writeup_repeats, writeup="ngc-vs-slurm"),
        Phase("vgg16-cifar", "VGG16 on CIFAR-size data: fp32, fp16, amp x batch 128 to 2048",
              pick(_cells({**base, "model": "cifar_vgg16"}, _each("precision", ["fp32", "fp16", "amp"]),
                          _each("batch_size", [128, 256, 512, 1024, 2048])),
                   [{**base, "model": "mlp", "precision": p, "batch_size": 2} for p in ("fp32", amp)]),
              writeup_repeats, writeup="apex-vgg16-cifar"),
        Phase("mnist-tensor-cores", "mnist_cnn: fp32 and amp at batch 512, amp at batch 1024",
              pick([{**base, "model": "mnist_cnn", **c} for c in (
                  {"precision": "fp32", "batch_size": 512}, {"precision": "amp", "batch_size": 512},
                  {"precision": "amp", "batch_size": 1024})],
                   [{**base, "model": "mlp", "precision": p, "batch_size": 8} for p in ("fp32", amp)]),
              writeup_repeats, writeup="tensor-cores-t4"),
        Phase("wrn-apex-levels", "WRN-28-10 at apex's O0-O3 x DataLoader workers 0/2/4/8 on a JPEG image folder",
              pick(_cells(wrn, [dict(OPT_LEVELS[level], opt_level=level) for level in OPT_LEVELS],
                          _each("workers", [0, 2, 4, 8])),
                   [{**wrn, **OPT_LEVELS["O0"], "opt_level": "O0", "workers": 0},
                    {**wrn, **OPT_LEVELS["O1"], "precision": amp, "opt_level": "O1", "workers": 2}]),
              writeup_repeats, writeup="wrn-apex-t4-p100"),
    ]
    return [_strip_labels(p) for p in phases]


def _strip_labels(phase: Phase) -> Phase:
    """Move the write-up's own names (opt_level) out of the params into the phase's labels."""
    cells, labels = [], []
    for c in phase.cells:
        c = dict(c)
        labels.append({"opt_level": str(c.pop("opt_level"))} if "opt_level" in c else {})
        cells.append(c)
    return Phase(phase.name, phase.title, tuple(cells), phase.repeats, phase.writeup, phase.reference, tuple(labels))


def select(phases: Sequence[Phase], names: Sequence[str]) -> list[Phase]:
    """The phases named (all when none); an unknown name lists the known ones."""
    if not names:
        return list(phases)
    known = [p.name for p in phases]
    unknown = [n for n in names if n not in known]
    if unknown:
        from runner.errors import ConfigError
        raise ConfigError(f"--only {', '.join(unknown)}: no such phase; phases: {', '.join(known)}")
    return [p for p in phases if p.name in names]
