"""What the kit measures: phases of cells in priority order (the headline first, so that a lease cut at any call
still has it), the a-priori device seconds of a repeat (`--plan`'s estimate model), and the same plan shrunk for
a CPU dry run.

A cell here is a mapping of `matrix.yaml` axis values (the kit writes one matrix file per cell, since each
cell gets its own calibrated iteration count). The dry run keeps every phase and table but one or two cells
each, with a tiny model (`mlp`; `gpt_tiny` for GPT-2) and batches that a CPU trains in milliseconds, and
`amp-bf16` where the plan says `amp` (a CPU has no FP16 autocast); what a CPU cannot run at all (the manual FP16
recipe, an image folder without torchvision, FP8) stays, and comes back `unsupported`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.domain.bench_contract import PRECISIONS
from runner.domain.cells import stable_hash

Params = dict[str, Any]

# The write-ups' names for apex's optimisation levels, as this project's precisions run them today.
OPT_LEVELS = {
    "O0": {"precision": "fp32"},                                  # pure FP32
    "O1": {"precision": "amp"},                                   # mixed precision: autocast + GradScaler
    "O2": {"precision": "amp", "amp_impl": "manual"},             # FP16 model, FP32 master weights
    "O3": {"precision": "fp16"},                                  # pure FP16
}
MANUAL_2018 = {"precision": "amp", "amp_impl": "manual", "loss_scale": 256.0}  # FP16 + FP32 masters, scale 256
# The image models' precisions: every one but fp8, which the transformer phase measures (FP8 training converts
# linear layers; a ResNet's convolutions stay BF16, so an fp8 ResNet cell would measure a BF16 network).
IMAGE_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp8")
# The transformer phase: GPT-2 124M at BF16 beside FP8 (torchao's two scaling recipes), compiled.
GPT2_PRECISIONS: tuple[Params, ...] = (
    {"precision": "bf16"}, {"precision": "amp-bf16"},
    {"precision": "fp8", "fp8_impl": "torchao", "fp8_recipe": "tensorwise"},
    {"precision": "fp8", "fp8_impl": "torchao", "fp8_recipe": "rowwise"})
# A model's own least window and most warm-up (compilation included), in seconds, where the kit's --window and
# --warmup-seconds do not fit it: GPT-2 124M's steps are long (32 x 1024 tokens, ~80 ms on an H100: a 5-s window
# is ~60 steps) and it compiles.
LIMITS = {"gpt2_124m": (5.0, 180.0), "gpt2_350m": (5.0, 240.0), "gpt2_774m": (5.0, 300.0), "gpt2_1558m": (5.0, 360.0)}


def limits(params: Mapping[str, Any], window: float, warmup: float, compiled: float) -> tuple[float, float]:
    """(least window, most warm-up with compilation's `compiled` seconds) of a cell."""
    least, most = LIMITS.get(str(params.get("model")), (0.0, 0.0))
    return max(window, least), (most or warmup + compiled)


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
    first_repeat: int = 0     # a phase that adds repeats to cells an earlier phase measured once
    whole: bool = False       # measured only when all of its repeats fit what is left (they answer one question)
    goal: str = ""            # the first call's: the goal it answers (its call is planned to the whole 540 s)
    note: str = ""            # why its cell was chosen over a better candidate (`--plan` says it)
    tests: tuple[str, ...] = ()  # the GPU tests (`pytest -m gpu` on these paths), not a matrix

    @property
    def all_or_nothing(self) -> bool:
        """Measured whole or not at all in a call: the hand-written loop (one script, every pair) and a `whole` phase."""
        return self.whole or self.reference

    def wanted(self) -> range:
        """The repeat numbers this phase stores for each of its cells."""
        return range(self.first_repeat, self.repeats)


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


# A repeat's device seconds before any is stored (`--plan`'s model; measured wall times replace it), from the first
# run on an H100 80GB HBM3 (2026-11-27, PyTorch 2.11; its kit.log and bench logs, /work/shared/gpu/h100-2026-11-27 in
# the development VM, reports/nvidia-h100-80gb-hbm3/MEASURED.md): a fresh process (Python, PyTorch, CUDA start-up, the
# model and data built, evaluation, exit), the warm-up until steady (at most --warmup-seconds) and the window (at
# least --window); a cell's first repeat on a machine adds cuDNN's autotuning and CUDA's kernel caches; torch.compile
# adds its compilation. Each constant is set so that the model reaches the largest figure logged, not the mean (the
# model of before promised call 1 ~528 s of what these figures make ~572 s):
#   kit.log, ResNet-50 eager: the plain cell's first repeat 38.7 s (the fast cell's 31.4), later ones 15.7 and 18.0 s:
#     13 + 20.5 + 3 + 2.2 = 38.7 first, 13 + 3 + 2.2 = 18.2 later;
#   kit.log, ResNet-50 compiled, first repeat 78.0 s: 13 + 3 + 60 + 2.2 = 78.2;
#   gpt-bf16.log, gpt-fp8.log, GPT-2 124M compiled (5-s windows): a process of 52 s at BF16, 87 s at FP8:
#     13 + 3 + 30.5 + 5.5 = 52.0 and 13 + 3 + 65.5 + 5.5 = 87.0;
#   kit.log (bench_vs_reference.py, ref.log): the hand-written loop's pairs ~19.75 s a process (~118 s for 3 pairs).
PROCESS_S = {"cuda": 13.0, "cpu": 3.0}
FIRST_S = {"cuda": 20.5, "cpu": 0.0}
COMPILE_S = 60.0                                  # an image model's compilation, caches cold
# A transformer's: (BF16, FP8: its casts and scales compile too). 124M's measured; the larger GPT-2s' are ESTIMATES,
# 124M's scaled by their layers (Dynamo traces the blocks unrolled: 24, 36 and 48 against 12), not yet measured.
COMPILE_MODEL_S = {"gpt2_124m": (30.5, 65.5), "gpt2_350m": (61.0, 131.0), "gpt2_774m": (91.5, 196.5),
                   "gpt2_1558m": (122.0, 262.0)}
COMPILE_WARM_S = 25.0  # later repeats on the same machine (inductor's FX graph and Triton caches warm): not measured
# A compile mode's seconds over the default's: an ESTIMATE, not measured (max-autotune benchmarks Triton's and
# cuBLAS's candidates for every matrix product and convolution; its choices are cached for later repeats too).
COMPILE_MODE_FACTOR = {"max-autotune": 3.0, "max-autotune-no-cudagraphs": 3.0}
# One process of the hand-written loop's comparison (bench or the loop, fixed iterations, its own start-up), where the
# kit has none of its own measured: the first run's ~19.75 s (benchmarks/bench_vs_reference.py, 3 pairs ~118 s).
REFERENCE_PROCESS_S = {"cuda": 19.75, "cpu": 3.0}
# The warm-up (compilation included) the kit allows a compiled cell before it gives up (most of a call's 540 s).
COMPILE_ALLOWANCE_S = 300.0
CALL_START_S = 150.0   # one call of the lease: the machine's start, the transfers, the wheels and the kit's start
CALL_MEASURE_S = 540.0  # what one call measures: 9 minutes (a 10-minute command, less the report, the pack, the start)
# What `--plan` fills a call with, of CALL_MEASURE_S: the rest is kept for the model's error (the first run's costs came
# out 44 s above the model of before over call 1's content: 572 s against 528). The kit itself measures up to its
# budget; the deadline stops a repeat that overruns it.
CALL_MARGIN_S = 45.0
# The GPU tests' own budget (pytest -m gpu on GPU_TESTS, stopped at it): the lever-loss tests, under a minute.
GPU_TESTS = ("tests/bench/test_levers_gpu.py",)
GPU_TESTS_S = 60.0


def compile_seconds(params: Mapping[str, Any], later: bool) -> float:
    """torch.compile's seconds in a repeat of this cell on a GPU (0 without compile)."""
    if not params.get("compile") or params.get("device") == "cpu":
        return 0.0
    factor = COMPILE_MODE_FACTOR.get(str(params.get("compile_mode")), 1.0)
    if later:
        return COMPILE_WARM_S * factor
    bf16, fp8 = COMPILE_MODEL_S.get(str(params.get("model")), (COMPILE_S, COMPILE_S))
    return (fp8 if params.get("precision") == "fp8" else bf16) * factor


def compile_allowance(params: Mapping[str, Any]) -> float:
    """The warm-up seconds a compiled cell may take on a GPU, its compilation included (0 without compile)."""
    if not params.get("compile") or params.get("device") == "cpu":
        return 0.0
    return COMPILE_ALLOWANCE_S * (1.4 if str(params.get("compile_mode")).startswith("max-autotune") else 1.0)


def guess_seconds(params: Mapping[str, Any], window: float, warmup: float, later: bool = False) -> float:
    """`later`: not the cell's first repeat (its compilation finds this machine's caches warm, cuDNN's autotuning
    and CUDA's caches are done)."""
    dev = "cpu" if params.get("device") == "cpu" else "cuda"
    compiled = compile_seconds(params, later)
    window, most = limits(params, window, warmup, compiled)
    first = 0.0 if later or compiled else FIRST_S[dev]
    return PROCESS_S[dev] + first + min(warmup + compiled, most) + 1.1 * window


def build(repeats: int = 3, dry: bool = False, device: str = "cuda", data_dir: str = "") -> list[Phase]:
    """The phases, in the order they run: the first call answers the goals (goal_phases: the GPU tests, the headline's
    plain and fastest rows, the hand-written loop, GPT-2's and ResNet-50's fastest lever sets, two repeats each);
    then the headline's other repeats, each lever's gain, GPT-2 at BF16 beside FP8, the 2018 recipe, every
    write-up's grid at one repeat a cell, GPT-2's four cells, FP8 by size, then the grids' (and GPT-2's) other
    repeats. `dry`: the CPU dry run's tiny version of the same plan (every phase, one or two cells each)."""
    dev = "cpu" if dry else device
    base: Params = {"dataset": "synthetic", "device": dev, **({"threads": 1} if dry else {})}
    rn50: Params = {"model": "mlp" if dry else "resnet50", "batch_size": 4 if dry else 256, "cudnn_benchmark": True}
    amp = "amp-bf16" if dry else "amp"
    plain = {**base, **rn50, "precision": amp, "channels_last": True}

    def pick(full: Sequence[Params], small: Sequence[Params]) -> tuple[Params, ...]:
        return tuple(dict(c) for c in (small if dry else full))

    main = _cells({**base, **rn50}, _each("precision", IMAGE_PRECISIONS), _each("channels_last", [False, True]))
    wrn = {"model": "wrn", "wrn_depth": 10 if dry else 28, "wrn_width": 1 if dry else 10, "batch_size": 4 if dry
           else 128, "device": dev, "eval_batches": 1, "dataset": f"imagefolder:{data_dir}",
           **({"threads": 1} if dry else {})}
    grids = [
        Phase("resnet50", f"ResNet-50, synthetic ImageNet-size data, batch {rn50['batch_size']}: every precision x "
              "channels_last, cudnn.benchmark on",
              pick(main, [{**base, **rn50, "precision": "fp32", "channels_last": False}, plain]), 1),
        Phase("resnet50-breakdown", "ResNet-50 amp with --breakdown (forward, backward), batch 64 to 512",
              pick(_cells({**base, **rn50, "precision": amp, "breakdown": True},
                          _each("batch_size", [64, 128, 256, 512])),
                   [{**base, **rn50, "precision": amp, "breakdown": True}]),
              1, writeup="resnet50-throughput"),
        Phase("resnet-ngc-2018", "ResNet-18/50 at batch 128: fp32, the 2018 fp16 recipe (scale 256), autocast",
              pick(_cells({**base, "batch_size": 128}, _each("model", ["resnet18", "resnet50"]),
                          [{"precision": "fp32"}, dict(MANUAL_2018), {"precision": "amp"}]),
                   [{**base, "model": "mlp", "batch_size": 4, "precision": "fp32"},
                    {**base, "model": "mlp", "batch_size": 4, **MANUAL_2018}]),
              1, writeup="ngc-vs-slurm"),
        Phase("vgg16-cifar", "VGG16 on CIFAR-size data: fp32, fp16, amp x batch 128 to 2048",
              pick(_cells({**base, "model": "cifar_vgg16"}, _each("precision", ["fp32", "fp16", "amp"]),
                          _each("batch_size", [128, 256, 512, 1024, 2048])),
                   [{**base, "model": "mlp", "precision": p, "batch_size": 2} for p in ("fp32", amp)]),
              1, writeup="apex-vgg16-cifar"),
        Phase("mnist-tensor-cores", "mnist_cnn: fp32 and amp at batch 512, amp at batch 1024",
              pick([{**base, "model": "mnist_cnn", **c} for c in (
                  {"precision": "fp32", "batch_size": 512}, {"precision": "amp", "batch_size": 512},
                  {"precision": "amp", "batch_size": 1024})],
                   [{**base, "model": "mlp", "precision": p, "batch_size": 8} for p in ("fp32", amp)]),
              1, writeup="tensor-cores-t4"),
        Phase("wrn-apex-levels", "WRN-28-10 at apex's O0-O3 x DataLoader workers 0/2/4/8 on a JPEG image folder",
              pick(_cells(wrn, [dict(OPT_LEVELS[level], opt_level=level) for level in OPT_LEVELS],
                          _each("workers", [0, 2, 4, 8])),
                   [{**wrn, **OPT_LEVELS["O0"], "opt_level": "O0", "workers": 0},
                    {**wrn, **OPT_LEVELS["O1"], "precision": amp, "opt_level": "O1", "workers": 2}]),
              1, writeup="wrn-apex-t4-p100"),
    ]
    gpt2 = gpt2_phase(base, repeats, dry)
    fastest, levers = resnet_fastest_phase(plain, repeats, dry), gpt2_levers_phase(gpt2, repeats, dry)
    phases = [
        # The first call: the goals' rows, two repeats each, priced by the model above (goal_phases).
        *goal_phases(plain, headline_cells(plain, dry)[-1], levers.cells[4], static_candidates(plain, dry),
                     min(repeats, 2), dev),
        Phase("headline", "ResNet-50 at batch " + str(rn50["batch_size"]) + ": the plain eager recipe (autocast, "
              "channels_last, cudnn.benchmark) beside the fastest honest settings (every speed lever on)",
              tuple(dict(c) for c in headline_cells(plain, dry)), repeats),
        # Then by value: each lever's gain toward the goals (its other rows, max-autotune's), then today's training
        # at BF16 beside FP8, the 2018 recipe, the write-ups' grids at one repeat, GPT-2, FP8 by size (its goal at
        # 1.5B), and last the grids' other repeats.
        fastest, levers,
        Phase("gpt2-first", gpt2.title.split(":")[0] + ": bf16 beside fp8 (torchao, tensorwise), one repeat each",
              tuple(dict(c) for c in gpt2.cells if c["precision"] == "bf16" or c.get("fp8_recipe") == "tensorwise"),
              1, whole=True),
        Phase("recipe-2018", "The 2018 recipe (FP16 model, FP32 master weights, static loss scale 256) beside "
              "native autocast",
              pick(_cells({**base, **rn50, **MANUAL_2018}, _each("channels_last", [False, True])),
                   [{**base, **rn50, **MANUAL_2018, "channels_last": False}]), repeats),
        *grids, gpt2, fp8_by_size_phase(base, repeats, dry),
    ]
    if repeats > 1:
        every = tuple(c for g in [gpt2, *grids] for c in g.cells)
        phases.append(Phase("more-repeats", f"The write-ups' grids and GPT-2 up to {repeats} repeats a cell", every, repeats,
                            first_repeat=1))
    return [_strip_labels(p) for p in phases]


def gpt2_phase(base: Params, repeats: int, dry: bool) -> Phase:
    """GPT-2 124M, 1024 tokens a sequence, batch 32, synthetic tokens, compiled, at BF16 (pure and autocast)
    beside FP8 through torchao (tensorwise and rowwise scaling): two repeats a cell here, the fewest that give
    FP8 over BF16 a p-value (more-repeats adds the rest). The dry run's stand-in: `gpt_tiny`, 32 tokens, batch 2,
    eager (inductor on a CPU compiles C++ for minutes); FP8 there is `unsupported`, with preflight's sentence."""
    if dry:
        model: Params = {"model": "gpt_tiny", "seq_len": 32, "batch_size": 2, "compile": False}
        precisions = [GPT2_PRECISIONS[0], GPT2_PRECISIONS[2]]
    else:
        model = {"model": "gpt2_124m", "seq_len": 1024, "batch_size": 32, "compile": True}
        precisions = list(GPT2_PRECISIONS)
    cells = _cells({**base, **model, "attention": "auto"}, [dict(p) for p in precisions])
    return Phase("gpt2-124m", f"GPT-2 124M ({model['model']}), {model['seq_len']} tokens x batch "
                 f"{model['batch_size']}, synthetic tokens, torch.compile {'on' if model['compile'] else 'off'}: "
                 "bf16 and amp-bf16 beside fp8 (torchao, tensorwise and rowwise scaling)",
                 cells, min(repeats, 2))


GOALS = json.loads(Path(__file__).with_name("published.json").read_text())["goals"]


def goal_phases(plain: Params, fastest: Params, gpt2: Mapping[str, Any], candidates: Sequence[Params], n: int, dev: str
                ) -> list[Phase]:
    """The first call: a row for each goal (published.json "goals"), n repeats each, in order of value: the GPU tests
    (the levers' losses, a budget of their own), the headline's plain and fastest rows, the hand-written loop beside
    the plain row, GPT-2 124M's fastest lever set, then ResNet-50's: the first of `candidates` whose repeats fit
    what the others leave of CALL_MEASURE_S, by the model at the kit's default window and warm-up (so that the
    choice never changes between calls), `note` saying why a better one waits."""
    def cost(p: Mapping[str, Any]) -> float:
        return guess_seconds(p, 2.0, 3.0) + (n - 1) * guess_seconds(p, 2.0, 3.0, later=True)

    room = CALL_MEASURE_S - GPU_TESTS_S - cost(plain) - cost(fastest) - cost(gpt2) - n * 2 * REFERENCE_PROCESS_S[dev]
    chosen = next((c for c in candidates if cost(c) <= room), candidates[-1])
    note = "" if chosen is candidates[0] else (
        f"{row_name(candidates[0])} (~{cost(candidates[0]):.0f} s for {n} repeats) does not fit the ~{room:.0f} s the "
        f"other goals' rows leave of {CALL_MEASURE_S:.0f} s: {row_name(chosen)} (~{cost(chosen):.0f} s) answers "
        f"the goal{' now' if cost(chosen) <= room else ' in the next call'}; the first comes with resnet50-fastest")
    return [
        Phase("gpu-tests", f"The GPU tests: pytest -m gpu {' '.join(GPU_TESTS)}, at most {GPU_TESTS_S:.0f} s",
              ({"device": dev},), 1, whole=True, tests=GPU_TESTS,
              goal="the levers' losses against eager on a GPU (tolerances reasoned, not yet run on one)"),
        Phase("goal-headline", "The headline's plain row and its fastest honest row", (dict(plain), dict(fastest)),
              n, whole=True, goal=f"every headline row admitted with {n} repeat{'s' if n > 1 else ''} or more (its fastest beside "
              f"ResNet-50's {GOALS['resnet50_img_s']:,} img/s)"),
        Phase("reference", "The hand-written autocast loop on the plain cell's model, batch, data and optimizer "
              "(benchmarks/bench_vs_reference.py), alternating with bench", (dict(plain),), n, reference=True,
              goal="bench within 3% of the hand-written loop (bench_vs_reference.py's tolerance)"),
        Phase("goal-gpt2", "GPT-2 124M's fastest lever set", (dict(gpt2),), n, whole=True,
              goal=f"GPT-2 124M MFU at least {GOALS['gpt2_124m_mfu']:.0%}"),
        Phase("goal-resnet50", "ResNet-50's fastest lever set", (dict(chosen),), n, whole=True, note=note,
              goal=f"ResNet-50 at least {GOALS['resnet50_img_s']:,} img/s"),
    ]


def row_name(p: Mapping[str, Any]) -> str:
    """A cell's levers in a few words (`--plan`'s first call)."""
    words = [str(p.get("model")), str(p.get("precision"))]
    words += [f"static loss scale {p['loss_scale']:g}"] if p.get("loss_scale") else []
    words += [f"{p['optimizer_impl']} {p.get('optimizer', 'SGD')}"] if p.get("optimizer_impl") else []
    words += [f"{p['loss_impl']} loss"] if p.get("loss_impl") else []
    words += [f"{p['attention']} attention"] if p.get("attention") not in (None, "auto") else []
    words += ["one CUDA graph"] if p.get("cuda_graphs") else []
    return ", ".join([*words, f"{p.get('compile_mode') or 'default'} compile" if p.get("compile") else "eager"])


def headline_cells(plain: Params, dry: bool) -> list[Params]:
    """The plain eager recipe, then the same training step with the speed levers on, each part of the cell's
    definition: bf16 autocast (no loss scaler, so the whole step can be one CUDA graph), the fused optimizer, the
    data generated on the device (every cell here: synthetic), the whole step as a CUDA graph, and torch.compile
    under it. On a CPU the graphs are `unsupported`, with the sentence that says why."""
    fast = {**plain, "precision": "amp-bf16", "optimizer_impl": "fused", "cuda_graphs": True}
    if dry:
        return [plain, fast]
    return [plain, fast, {**fast, "compile": True, "compile_mode": "default"}]


def _strip_labels(phase: Phase) -> Phase:
    """Move the write-up's own names (opt_level) out of the params into the phase's labels."""
    cells, labels = [], []
    for c in phase.cells:
        c = dict(c)
        labels.append({"opt_level": str(c.pop("opt_level"))} if "opt_level" in c else {})
        cells.append(c)
    return dataclasses.replace(phase, cells=tuple(cells), labels=tuple(labels))


def select(phases: Sequence[Phase], names: Sequence[str]) -> list[Phase]:
    """The phases named (all when none); an unknown name lists the known ones."""
    if not names:
        return list(phases)
    known = [p.name for p in phases]
    unknown = [n for n in names if n not in known]
    if unknown:
        from runner.base.errors import ConfigError
        raise ConfigError(f"--only {', '.join(unknown)}: no such phase; phases: {', '.join(known)}")
    return [p for p in phases if p.name in names]


# --- issue 38: each speed lever's gain -----------------------------------------------------------------------------
STATIC_FP16 = {"precision": "amp", "loss_scale": 256.0}  # FP16 autocast with a static scale: no GradScaler
# GPT-2 at each size, 1024 tokens a sequence: (model, batch, activation checkpointing). Batch 32 where it fits an
# 80 GB GPU without recomputing (by the usual count: ~36 x width bytes a token and a layer of activations in BF16, the
# logits and their FP32 copies ~0.5 MB a token, 12 bytes a weight for FP32 weights, gradients and momentum; 124M
# measured 28.9 GB allocated and 38.4 GB reserved at batch 32: the allocator keeps a third more); 774M at batch 16
# (~46 GB); 1.5B at batch 16 only with each block recomputed (~35 GB; without, ~72 GB, past 80 with the reserve).
GPT2_SIZES = (("gpt2_124m", 32, False), ("gpt2_350m", 32, False), ("gpt2_774m", 16, False),
              ("gpt2_1558m", 16, True))


def static_candidates(plain: Params, dry: bool) -> list[Params]:
    """ResNet-50's fastest lever set, best first: FP16 autocast with a static loss scale (no GradScaler, so the whole
    step is one CUDA graph), fused SGD, under max-autotune, else under the default compile (the goal's call takes
    the first that fits: goal_phases). The dry run's: the same step eager (FP16 and the graphs are `unsupported` on
    a CPU, each with its sentence)."""
    static = {**plain, **STATIC_FP16, "optimizer_impl": "fused", "cuda_graphs": True}
    if dry:
        return [static]
    return [{**static, "compile": True, "compile_mode": mode} for mode in ("max-autotune", "default")]


def resnet_fastest_phase(plain: Params, repeats: int, dry: bool) -> Phase:
    """ResNet-50's fastest step: the headline's fastest (BF16, fused SGD, one CUDA graph, compiled) beside the same
    under max-autotune, and the FP16 step with a static loss scale (no GradScaler, so the whole step is one CUDA
    graph) compiled (default, and max-autotune at batch 256 and 512). On a CPU: FP16 and the graphs are
    `unsupported`, with their sentences."""
    fast = {**plain, "precision": "amp-bf16", "optimizer_impl": "fused", "cuda_graphs": True}
    auto, *default = static_candidates(plain, dry)
    if dry:
        cells = [fast, {**fast, "compile": True, "compile_mode": "max-autotune"}, auto,
                 {**auto, "batch_size": 2 * plain["batch_size"]}]
    else:
        fast = {**fast, "compile": True, "compile_mode": "default"}
        cells = [fast, {**fast, "compile_mode": "max-autotune"}, *default, auto, {**auto, "batch_size": 512}]
    return Phase("resnet50-fastest", f"ResNet-50 fastest: the headline's fastest (bf16, fused SGD, one CUDA graph, "
                 "torch.compile) beside max-autotune and the FP16 step with a static loss scale as one CUDA graph, "
                 f"batch {plain['batch_size']} and {2 * plain['batch_size'] if dry else 512}",
                 tuple(cells), min(repeats, 2))


def gpt2_levers_phase(gpt2: Phase, repeats: int, dry: bool) -> Phase:
    """GPT-2 124M at amp-bf16, compiled (the gpt2-124m phase's cell), then one lever more a row: AdamW fused (how a GPT
    trains), the chunked cross-entropy, flash attention, the whole step as one CUDA graph; and cuDNN's attention in
    the last row's place. The dry run's stand-in: gpt_tiny, eager; the graphs and cuDNN's attention are `unsupported`
    on a CPU, each with its sentence."""
    base = {**gpt2.cells[0], "precision": "amp-bf16"}  # its first cell is bf16: the same cell at autocast
    adamw = {**base, "optimizer": "adamw", "optimizer_impl": "fused"}
    chunked = {**adamw, "loss_impl": "chunked"}
    flash = {**chunked, "attention": "flash"}
    graphs = {**flash, "cuda_graphs": True}
    # On a CPU the graphs refuse before the attention is chosen: the dry run's cuDNN row has no graph, to say its own.
    cells = [base, adamw, chunked, flash, graphs, {**(flash if dry else graphs), "attention": "cudnn"}]
    return Phase("gpt2-levers", f"GPT-2 124M levers ({base['model']}, {base['seq_len']} tokens x batch "
                 f"{base['batch_size']}, amp-bf16, torch.compile {'on' if base['compile'] else 'off'}): AdamW fused, "
                 "the chunked cross-entropy, flash or cuDNN attention, the whole step as one CUDA graph, one more a row",
                 tuple(cells), min(repeats, 2))


def fp8_by_size_phase(base: Params, repeats: int, dry: bool) -> Phase:
    """GPT-2 124M, 350M, 774M and 1.5B at bf16 (FP8's base) and amp-bf16 beside FP8 (torchao, tensorwise and
    rowwise), compiled, at a batch
    that fits 80 GB (GPT2_SIZES; checkpointing where it would not, part of the cell): where FP8 starts to win. 124M's
    cells are the gpt2-124m phase's. The dry run's stand-ins: gpt_tiny, and gpt_small with checkpointing; FP8 is
    `unsupported` there, with preflight's sentence."""
    # bf16 is every FP8 ratio's base (runner/kit/transformer.py BASE); amp-bf16 is measured beside it.
    precisions = [{"precision": "bf16"}, {"precision": "amp-bf16"}, dict(GPT2_PRECISIONS[2]), dict(GPT2_PRECISIONS[3])]
    sizes: Sequence[tuple[str, int, bool]] = (("gpt_tiny", 2, False), ("gpt_small", 2, True)) if dry else GPT2_SIZES
    cells: list[Params] = []
    for model, batch, checkpoint in sizes:
        common: Params = {**base, "model": model, "seq_len": 32 if dry else 1024, "batch_size": batch,
                          "compile": not dry, "attention": "auto", **({"checkpoint": True} if checkpoint else {})}
        cells += _cells(common, [precisions[0], precisions[2]] if dry else precisions)
    return Phase("fp8-by-size", "FP8 by size: GPT-2 " + ", ".join(f"{m} (batch {b}{', checkpointed' if c else ''})"
                                                                  for m, b, c in sizes)
                 + ", bf16 and amp-bf16 beside fp8 (torchao, tensorwise and rowwise), compiled: where FP8 starts "
                 "to win",
                 tuple(cells), min(repeats, 2))
