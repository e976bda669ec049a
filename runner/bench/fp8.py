"""The fp8 precision: FP8 matrix products through a kept library, never hand-written scaling. torchao's float8
training (Float8Linear, a recipe of scaling and formats) or NVIDIA Transformer Engine (te.Linear under
fp8_autocast, delayed scaling); weights, activations and the rest of the model stay BF16, as in `bf16`, so
fp8 against bf16 is the linear layers' math alone. What ran, with its recipe, goes into the result."""

import importlib

from .compat import IMPORT_ERRORS, nn, optional_module, torch, version_of
from .errors import Unsupported
from .preflight import fp8_problem


def _torchao():
    """torchao.float8 with the training API (convert_to_float8_training, Float8LinearConfig recipes), or None."""
    mod = optional_module("torchao.float8")
    if mod is None or not hasattr(mod, "convert_to_float8_training") or not hasattr(
            getattr(mod, "Float8LinearConfig", None), "from_recipe_name"):
        return None
    return mod


def _te():
    mod = optional_module("transformer_engine.pytorch")
    return mod if mod is not None and hasattr(mod, "fp8_autocast") and hasattr(mod, "Linear") else None


def choose_library(requested):
    """(name, None) for the FP8 library --fp8-impl picks here, or (None, why none)."""
    found = {"torchao": _torchao, "te": _te}
    for name in (("torchao", "te") if requested == "auto" else (requested,)):
        if found[name]() is not None:
            return name, None
    why = {"torchao": "torchao float8 training is not importable (%s)" % IMPORT_ERRORS.get(
               "torchao.float8", "torchao.float8 lacks convert_to_float8_training"),
           "te": "Transformer Engine is not importable (%s)" % IMPORT_ERRORS.get(
               "transformer_engine.pytorch", "no fp8_autocast")}
    if requested == "auto":
        return None, "%s; %s" % (why["torchao"], why["te"])
    return None, why[requested]


def plan_fp8(args, device, capability):
    """The plan's fp8 entries, or Unsupported with preflight's sentence."""
    library = choose_library(args.fp8_impl) if device.type == "cuda" else (None, "not looked for")
    why = fp8_problem(device.type, capability, hasattr(torch, "float8_e4m3fn"), library)
    if why:
        raise Unsupported(why)
    plan = {"mechanism": library[0], "dtype": "float8", "model_dtype": torch.bfloat16, "input_dtype": torch.bfloat16,
            "fp8_recipe": args.fp8_recipe if library[0] == "torchao" else "delayed"}
    if library[0] == "te":
        te = _te()
        recipe = importlib.import_module("transformer_engine.common.recipe")
        fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID)
        plan["autocast"] = lambda: te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe)
    return plan


def _fits(module):
    """FP8 matrix products need both sizes divisible by 16."""
    return isinstance(module, nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


def _dtype_word(dtype):
    return str(dtype).replace("torch.float8_", "").upper()


def convert(model, plan):
    """The model with its linear layers in FP8, and the record of how: library, recipe, formats, layers, and
    `fp8_matmul_weights` (in x out summed over the converted layers: their matrix products' share of the FLOPs)."""
    before = sum(1 for m in model.modules() if isinstance(m, nn.Linear))
    if plan["mechanism"] == "torchao":
        ao = _torchao()
        config = ao.Float8LinearConfig.from_recipe_name(plan["fp8_recipe"])
        model = ao.convert_to_float8_training(model, config=config, module_filter_fn=lambda m, fqn: _fits(m))
        casts = (("input", config.cast_config_input), ("weight", config.cast_config_weight),
                 ("grad_output", config.cast_config_grad_output))
        formats = ", ".join("%s %s" % (name, _dtype_word(c.target_dtype)) for name, c in casts)
        scaling = ", ".join(sorted(set(str(getattr(c.scaling_granularity, "value", c.scaling_granularity))
                                       for _, c in casts)))
        fp8 = [m for m in model.modules() if type(m).__name__ == "Float8Linear"]
        converted, weights = len(fp8), sum(m.in_features * m.out_features for m in fp8)
        version = version_of(optional_module("torchao"))
    else:
        converted, weights = _swap_te_linear(model, _te())
        formats, scaling = "HYBRID: E4M3 forward, E5M2 gradients", "delayed (amax history)"
        version = version_of(optional_module("transformer_engine"))
    return model, {"library": plan["mechanism"], "version": version, "recipe": plan["fp8_recipe"],
                   "formats": formats, "scaling": scaling, "linear_layers": before, "fp8_layers": converted,
                   "fp8_matmul_weights": weights}


def _swap_te_linear(model, te):
    """Every fitting nn.Linear replaced by te.Linear holding the same parameters (ties survive): (the count, their
    weights' elements: in x out summed, what flops.fp8_flops_share counts)."""
    swapped = weights = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not _fits(child) or isinstance(child, te.Linear):
                continue
            new = te.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                            params_dtype=child.weight.dtype, device=child.weight.device)
            new.weight = child.weight
            if child.bias is not None:
                new.bias = child.bias
            setattr(parent, name, new)
            swapped += 1
            weights += child.in_features * child.out_features
    return swapped, weights
