"""The benchmark's contract as literal data: the names a matrix file may use, the exit statuses, the
result line and the rules every option value must follow.

Only literal assignments live here. The controller reads this file with `ast` (runner/domain/bench_contract.py),
without importing torch or running any of it, and `matrix plan` holds a matrix file to the same rules
that bench's own parser (args.py) applies: one source, checked twice (tests/domain/test_contract.py).
"""

SCHEMA = 1
RESULT_PREFIX = "MATRIX_RESULT "
EXIT_OK, EXIT_FAILED, EXIT_BAD_ARGS, EXIT_OOM, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4
# The training did not stay finite: a loss (warm-up or window) was NaN or infinite. A result line is printed, its
# figures kept for the record, and no command ranks them (docs/admission.md).
EXIT_DIVERGED = 5
# A measured window below this share of --window-time was sized from a wrong estimate and is measured again;
# between it and the time asked it is completed where it stands (runner/bench/timing.py). Admission holds a result
# from before windows were completed (no metrics.window_asked_s) to this share of its promise (docs/admission.md).
WINDOW_REDO_BELOW = 0.8
PRECISIONS = ("fp32", "tf32", "fp16", "amp", "amp-bf16", "bf16", "fp8")
AMP_IMPLS = ("auto", "native", "apex", "manual")
DEVICES = ("auto", "cpu", "cuda")
DATASET_KINDS = ("npz", "cifar10", "imagefolder", "text")  # KIND:PATH, besides "synthetic"
LOSS_END_WINDOW = 5  # loss_end is the mean of this many last measured iterations
# Speed levers (args.py's block of the same name): the optimizer and its implementation, torch.compile's mode, the
# transformer's loss (plain: the whole logits tensor; chunked: the output projection and cross-entropy a chunk of
# rows at a time, the full logits never held).
OPTIMIZERS = ("sgd", "adamw")
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "plain")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
LOSS_IMPLS = ("plain", "chunked")
# The learning rate each optimizer trains with when --lr is not given: SGD's as before; AdamW's is nanoGPT's and
# llm.c's for GPT-2 124M (6e-4).
DEFAULT_LR = {"sgd": 0.01, "adamw": 0.0006}

# name -> (input channels, default image size, default classes)
TORCHVISION_MODELS = {
    "resnet18": (3, 224, 1000), "resnet34": (3, 224, 1000), "resnet50": (3, 224, 1000),
    "resnet101": (3, 224, 1000), "resnet152": (3, 224, 1000),
    "vgg16": (3, 224, 1000), "vgg16_bn": (3, 224, 1000),
    "wide_resnet50_2": (3, 224, 1000), "resnext50_32x4d": (3, 224, 1000),
    "mobilenet_v2": (3, 224, 1000), "densenet121": (3, 224, 1000),
}
BUILTIN_MODELS = {
    "cifar_vgg16": (3, 32, 10), "wrn": (3, 32, 10), "mnist_cnn": (1, 28, 10), "mlp": (1, 28, 10),
}

# The decoder-only transformers (GPT-2 family: learned positions, pre-LayerNorm, GELU, causal self-attention,
# output projection tied to the token embedding): name -> (layers, heads, width, context length, vocabulary).
# A sequence is --seq-len tokens, the context length unless given; text data is byte-level (256 ids). GPT-2's
# 50257-token vocabulary is padded to 50304 (a multiple of 64, as nanoGPT and llm.c train it): every matrix
# product then has FP8- and tensor-core-friendly sizes, the output projection included.
TRANSFORMER_MODELS = {
    "gpt_tiny": (2, 2, 64, 128, 256), "gpt_small": (4, 4, 256, 256, 256),
    "gpt2_124m": (12, 12, 768, 1024, 50304), "gpt2_350m": (24, 16, 1024, 1024, 50304),
    "gpt2_774m": (36, 20, 1280, 1024, 50304), "gpt2_1558m": (48, 25, 1600, 1024, 50304),
}
# --attention: auto (SDPA where this torch has it, else plain), plain (the hand-written softmax(QK^T)V that
# every torch runs), or one SDPA backend forced through torch.nn.attention.sdpa_kernel.
ATTENTION_BACKENDS = ("auto", "plain", "math", "flash", "mem_efficient", "cudnn")
FP8_IMPLS = ("auto", "torchao", "te")  # torchao float8 training; NVIDIA Transformer Engine
FP8_RECIPES = ("tensorwise", "rowwise")  # torchao's scaling recipes (TE: delayed scaling, HYBRID formats)

# The smallest image (height and width, pixels) each model takes; a model not named takes
# MIN_IMAGE_SIZE_DEFAULT. A smaller --image-size is a bad argument, whatever the data set.
MIN_IMAGE_SIZE = {"cifar_vgg16": 32, "wrn": 4, "mnist_cnn": 6, "mlp": 1}
MIN_IMAGE_SIZE_DEFAULT = 32

# Every numeric option's rule (the option's name as in args.py, `--batch-size` -> "batch_size").
#   type     "int" or "float" (a float must also be finite)
#   min/max  inclusive bounds; above: an exclusive lower bound
#   modulo   [m, r]: the value is r modulo m
#   allowed  the rule in words, as error messages show it
# A rule holds for the option whatever the other options are; what depends on two options is below.
ARGUMENT_RULES = {
    "batch_size": {"type": "int", "min": 1, "allowed": "an integer of at least 1 (per process)"},
    "iterations": {"type": "int", "min": 0, "allowed": "an integer of at least 0 (0: no training)"},
    "warmup": {"type": "int", "min": 0, "allowed": "an integer of at least 0"},
    "warmup_max": {"type": "int", "min": 1, "allowed": "an integer of at least 1"},
    "warmup_time": {"type": "float", "above": 0, "allowed": "a finite number of seconds above 0"},
    "steady_window": {"type": "int", "min": 2, "allowed": "an integer of at least 2"},
    "steady_tolerance": {"type": "float", "above": 0, "max": 1, "allowed": "a fraction above 0 and at most 1"},
    "window_time": {"type": "float", "above": 0, "allowed": "a finite number of seconds above 0"},
    "window_min": {"type": "int", "min": 1, "allowed": "an integer of at least 1"},
    "window_max": {"type": "int", "min": 1, "allowed": "an integer of at least 1"},
    "seed": {"type": "int", "min": 0, "max": 4294967295,
             "allowed": "an integer from 0 to 4294967295 (2**32 - 1, what numpy takes)"},
    "threads": {"type": "int", "min": 1, "allowed": "an integer of at least 1"},
    "workers": {"type": "int", "min": 0, "allowed": "an integer of at least 0 (0: load in the main process)"},
    "image_size": {"type": "int", "min": 1, "allowed": "an integer of at least 1 (pixels)"},
    "num_classes": {"type": "int", "min": 1, "allowed": "an integer of at least 1"},
    "eval_batches": {"type": "int", "min": 1, "allowed": "an integer of at least 1"},
    "synthetic_batches": {"type": "int", "min": 1, "allowed": "an integer of at least 1"},
    "wrn_depth": {"type": "int", "min": 10, "modulo": [6, 4],
                  "allowed": "6n+4 with n >= 1 (10, 16, 22, 28, ...)"},
    "wrn_width": {"type": "int", "min": 1, "allowed": "an integer of at least 1"},
    "loss_scale": {"type": "float", "above": 0, "allowed": "a finite number above 0"},
    "seq_len": {"type": "int", "min": 2, "allowed": "an integer of at least 2 (tokens)"},
    "lr": {"type": "float", "above": 0, "allowed": "a finite number above 0"},
}
