"""bench's command line: the parser, and every value held to contract.py's rules before any work."""

import argparse
import math
import os
import sys

from .contract import (
    AMP_IMPLS,
    ARGUMENT_RULES,
    ATTENTION_BACKENDS,
    BUILTIN_MODELS,
    COMPILE_MODES,
    DATASET_KINDS,
    DEFAULT_LR,
    DEVICES,
    EXIT_BAD_ARGS,
    FP8_IMPLS,
    FP8_RECIPES,
    LOSS_IMPLS,
    MIN_IMAGE_SIZE,
    MIN_IMAGE_SIZE_DEFAULT,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
    TORCHVISION_MODELS,
    TRANSFORMER_MODELS,
)
from .errors import BadArgs


class _ArgParser(argparse.ArgumentParser):
    """argparse that fails with exit 2 and one line, as internals.md asks."""

    def error(self, message):
        sys.stderr.write("%s: error: %s\n" % (self.prog, " ".join(str(message).split())))
        sys.exit(EXIT_BAD_ARGS)


def build_parser():
    p = _ArgParser(prog="bench", description="Train a model for a measured window and print "
                   "one MATRIX_RESULT JSON line on stdout (docs/internals.md).")
    p.add_argument("--model", required=True,
                   help="torchvision: %s; built-in: %s; transformers: %s" % (
                       ", ".join(sorted(TORCHVISION_MODELS)), ", ".join(sorted(BUILTIN_MODELS)),
                       ", ".join(sorted(TRANSFORMER_MODELS))))
    p.add_argument("--precision", required=True, choices=PRECISIONS)
    p.add_argument("--batch-size", required=True, type=int, help="per process (per rank)")
    p.add_argument("--dataset", required=True,
                   help="synthetic | npz:PATH | cifar10:DIR | imagefolder:DIR | text:PATH (bytes, for a transformer)")
    p.add_argument("--iterations", type=int, default=None,
                   help="measured iterations (0: no training; default 50); with --window-time, the count an "
                   "earlier repeat calibrated")
    p.add_argument("--warmup", type=int, default=10,
                   help="discarded iterations before the window (with --warmup-max: the least of them)")
    p.add_argument("--warmup-max", type=int, default=None,
                   help="warm up until the iteration times are steady, at most this many iterations")
    p.add_argument("--warmup-time", type=float, default=None,
                   help="with --warmup-max: warm up for at most this many seconds")
    p.add_argument("--steady-window", type=int, default=5,
                   help="with --warmup-max: iterations per window of the steady-state rule")
    p.add_argument("--steady-tolerance", type=float, default=0.05,
                   help="with --warmup-max: the change between two windows' medians that counts as steady")
    p.add_argument("--window-time", type=float, default=None,
                   help="calibrate the measured iterations from the warm-up for a window of at least this many "
                   "seconds (unless --iterations gives the count)")
    p.add_argument("--window-min", type=int, default=3, help="with --window-time: at least this many iterations")
    p.add_argument("--window-max", type=int, default=10000, help="with --window-time: at most this many iterations")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--workers", type=int, default=4, help="DataLoader workers for real data")
    p.add_argument("--loss-scale", type=float, default=None,
                   help="a static loss scale for FP16 amp: native autocast without a GradScaler (no host check: the "
                   "step can be one CUDA graph), or the manual master-weights recipe (default there: 256)")
    p.add_argument("--breakdown", action="store_true",
                   help="time forward/backward/optimizer (synchronises after every phase)")
    p.add_argument("--image-size", type=int, default=None, help="input height and width")
    p.add_argument("--num-classes", type=int, default=None)
    p.add_argument("--wrn-depth", type=int, default=28)
    p.add_argument("--wrn-width", type=int, default=10)
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: %s)" % ", ".join("%s %g" % kv for kv in sorted(DEFAULT_LR.items())))
    p.add_argument("--amp-impl", choices=AMP_IMPLS, default="auto",
                   help="force the FP16 mixed-precision mechanism of --precision amp")
    p.add_argument("--eval-batches", type=int, default=None, help="cap on test batches evaluated")
    p.add_argument("--synthetic-batches", type=int, default=4,
                   help="size of the pool of synthetic batches generated once on the device")
    # Speed levers, each recorded with the result (its precision record): the optimizer and its implementation,
    # torch.compile's mode, and the whole training step captured as one CUDA graph.
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd",
                   help="sgd: momentum 0.9; adamw: betas 0.9/0.95, weight decay 0.1 on matrices only (nanoGPT's)")
    p.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS, default="auto",
                   help="the optimizer's implementation (auto: fused, else foreach, on CUDA; plain: the per-tensor "
                   "loop)")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, default=None, help="with --compile: torch.compile's mode")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="capture the whole training step (forward, backward, optimizer) as one CUDA graph, replayed")
    add_transformer_options(p)
    return p


def add_transformer_options(p):
    """The transformer's options (models in TRANSFORMER_MODELS) and the FP8 precision's."""
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per sequence (default: the model's context length)")
    p.add_argument("--attention", choices=ATTENTION_BACKENDS, default="auto",
                   help="auto: scaled_dot_product_attention where this torch has it, else plain (hand-written); "
                   "math, flash, mem_efficient, cudnn: that SDPA backend only")
    p.add_argument("--fp8-impl", choices=FP8_IMPLS, default="auto",
                   help="the FP8 training library of --precision fp8 (auto: torchao, else Transformer Engine)")
    p.add_argument("--fp8-recipe", choices=FP8_RECIPES, default="tensorwise",
                   help="torchao's float8 scaling recipe")
    p.add_argument("--loss-impl", choices=LOSS_IMPLS, default="plain",
                   help="the transformer's loss: plain (the whole logits tensor) or chunked (the output projection "
                   "and cross-entropy a chunk of rows at a time: the full logits are never held)")
    p.add_argument("--checkpoint", action="store_true",
                   help="activation checkpointing: each transformer block's activations recomputed in the backward")


def check_transformer_args(args):
    """--seq-len: a transformer's, at most its context; a transformer's data is tokens (synthetic or text:PATH)."""
    spec = TRANSFORMER_MODELS.get(args.model)
    if spec is None:
        if args.seq_len is not None:
            raise BadArgs("--seq-len applies to the transformer models (%s), not %s" % (
                ", ".join(sorted(TRANSFORMER_MODELS)), args.model))
        if args.data_kind == "text":
            raise BadArgs("--dataset text:PATH is token data for the transformer models (%s), not %s" % (
                ", ".join(sorted(TRANSFORMER_MODELS)), args.model))
        return
    if args.seq_len is not None and args.seq_len > spec[3]:
        raise BadArgs("--seq-len %d is longer than model %s's context; allowed: at most %d" % (
            args.seq_len, args.model, spec[3]))
    if args.data_kind not in ("synthetic", "text"):
        raise BadArgs("model %s trains on tokens: --dataset synthetic or text:PATH, not %s" % (
            args.model, args.dataset))
    if args.seq_len is None:
        args.seq_len = spec[3]


def breaks_rule(rule, value):
    """True when `value` is outside `rule` (an entry of contract.ARGUMENT_RULES)."""
    if rule["type"] == "float" and not math.isfinite(value):
        return True
    if "min" in rule and value < rule["min"]:
        return True
    if "max" in rule and value > rule["max"]:
        return True
    if "above" in rule and not value > rule["above"]:
        return True
    if "modulo" in rule and value % rule["modulo"][0] != rule["modulo"][1]:
        return True
    return False


def min_image_size(model):
    return MIN_IMAGE_SIZE.get(model, MIN_IMAGE_SIZE_DEFAULT)


def parse_dataset(spec):
    """'synthetic' or KIND:PATH, checked for existence so a typo fails before any work."""
    if spec == "synthetic":
        return "synthetic", None
    kind, sep, path = spec.partition(":")
    if not sep or kind not in DATASET_KINDS or not path:
        raise BadArgs("--dataset %r: expected synthetic, npz:PATH, cifar10:DIR, imagefolder:DIR or text:PATH" % spec)
    path = os.path.expanduser(path)
    if kind in ("npz", "text") and not os.path.isfile(path):
        raise BadArgs("--dataset %s: no such file %s" % (spec, path))
    if kind in ("cifar10", "imagefolder") and not os.path.isdir(path):
        raise BadArgs("--dataset %s: no such directory %s" % (spec, path))
    return kind, path


def parse_args(argv):
    """Parse and validate; every mistake is BadArgs or argparse's exit 2."""
    args = build_parser().parse_args(argv)
    known = list(TORCHVISION_MODELS) + list(BUILTIN_MODELS) + list(TRANSFORMER_MODELS)
    if args.model not in known:
        raise BadArgs("unknown model %r (known: %s)" % (args.model, ", ".join(sorted(known))))
    for name in sorted(ARGUMENT_RULES):
        value = getattr(args, name)
        if value is not None and breaks_rule(ARGUMENT_RULES[name], value):
            raise BadArgs("--%s %s is not allowed; allowed: %s" % (
                name.replace("_", "-"), value, ARGUMENT_RULES[name]["allowed"]))
    if args.image_size is not None and args.image_size < min_image_size(args.model):
        raise BadArgs("--image-size %d is too small for model %s; allowed: at least %d" % (
            args.image_size, args.model, min_image_size(args.model)))
    # Ceilings win over floors (--warmup-max over --warmup, --window-max over --window-min): a matrix file
    # is refused at plan time when they cross (runner/domain/cells.py); here the run stays within its budget.
    if args.window_time is not None and args.iterations is None and args.warmup == 0 and args.warmup_max is None:
        raise BadArgs("--window-time calibrates from warm-up iterations: give --warmup of at least 1")
    if args.compile_mode is not None and not args.compile:
        raise BadArgs("--compile-mode %s needs --compile" % args.compile_mode)
    if args.cuda_graphs and args.breakdown:
        raise BadArgs("--cuda-graphs replays forward, backward and update as one graph: --breakdown cannot time "
                      "them apart; allowed: one of the two")
    if args.iterations is None and args.window_time is None:
        args.iterations = 50
    if args.lr is None:
        args.lr = DEFAULT_LR[args.optimizer]
    args.data_kind, args.data_path = parse_dataset(args.dataset)
    check_transformer_args(args)
    return args


def params_of(args):
    """Every option as given: the cell's identity in the stored result."""
    skip = ("data_kind", "data_path")
    return dict((k, v) for k, v in sorted(vars(args).items()) if k not in skip)
