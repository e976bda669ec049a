"""The optimizer (--optimizer) and its implementation (--optimizer-impl): SGD with momentum 0.9 (the image models'
recipe) or AdamW as a GPT is trained (nanoGPT's and llm.c's GPT-2 recipe: betas 0.9/0.95, eps 1e-8, weight decay 0.1
on the matrices only, never on biases and norms), each fused, foreach or the per-tensor loop, and why."""

from .compat import accepted_kwargs, log, torch
from .errors import Unsupported

# Why auto never pairs fused SGD with a dynamic loss scaler (precision.optimizer_why).
FUSED_UNDER_SCALER = ("fused SGD under a dynamic loss scaler corrupts momentum on the steps the scaler skips "
                      "(seen in PyTorch 2.11: every repeat of ResNet-50 amp trained to NaN)")
# AdamW's hyperparameters besides the learning rate (GPT-2 in nanoGPT and llm.c); decay on tensors of 2 or more
# dimensions: the linear layers' and embeddings' matrices (and a CNN's kernels), not biases or norms' scales.
ADAMW_BETAS = (0.9, 0.95)
ADAMW_EPS = 1e-8
ADAMW_DECAY = 0.1
NAMES = {"sgd": "sgd-momentum-0.9", "adamw": "adamw-betas-0.9-0.95-wd-0.1"}


def optimizer_choices(want, device_type, accepted, allow_fused, dynamic_scaler, kind="sgd"):
    """The implementations to try, in order, as [(name, keyword arguments)], and why, for --optimizer-impl `want` on
    `device_type`, where the optimizer takes the keywords `accepted`. auto: fused, else foreach, on CUDA where this
    torch has them (fused SGD never under a dynamic loss scaler: FUSED_UNDER_SCALER; fused AdamW honours the
    scaler's skipped steps; nothing fused under apex: `allow_fused`); torch's default elsewhere. A named one is
    tried alone (make_optimizer says when this torch lacks it)."""
    label = "SGD" if kind == "sgd" else "AdamW"
    if want == "plain":
        return [("plain", {"foreach": False} if "foreach" in accepted else {})], "asked for: the per-tensor loop"
    if want in ("fused", "foreach"):
        why = "asked for (--optimizer-impl %s)" % want
        if want == "fused" and dynamic_scaler and kind == "sgd":
            why += "; under a dynamic loss scaler, which auto avoids: " + FUSED_UNDER_SCALER
        return [(want, {want: True})], why
    choices = []
    why = "auto on %s: torch's default %s (bench picks fused or foreach on CUDA only)" % (device_type, label)
    if device_type == "cuda":
        fused_ok = allow_fused and "fused" in accepted and not (dynamic_scaler and kind == "sgd")
        if fused_ok:
            choices.append(("fused", {"fused": True}))
        if "foreach" in accepted:
            choices.append(("foreach", {"foreach": True}))
        if fused_ok:
            why = "auto: fused, the fastest %s this torch has on CUDA" % label
        elif choices and not allow_fused:
            why = "auto: foreach, not fused: apex's amp patches the optimizer's step"
        elif choices and dynamic_scaler and "fused" in accepted:
            why = "auto: foreach, not fused: " + FUSED_UNDER_SCALER
        elif choices:
            why = "auto: foreach, this torch's %s has no fused implementation" % label
        else:
            why = "auto: torch's default %s, this torch's has neither fused nor foreach" % label
    return choices + [("default", {})], why


def decay_groups(params):
    """AdamW's two parameter groups: matrices (2+ dimensions) decayed, the rest (biases, norms' scales) not; and the
    record of the split."""
    decayed = [p for p in params if p.dim() >= 2]
    other = [p for p in params if p.dim() < 2]
    groups = [{"params": decayed, "weight_decay": ADAMW_DECAY}, {"params": other, "weight_decay": 0.0}]
    record = {"value": ADAMW_DECAY, "on": "matrices (tensors of 2+ dimensions); biases and norms not decayed",
              "decayed_tensors": len(decayed), "decayed_parameters": int(sum(p.numel() for p in decayed)),
              "other_tensors": len(other), "other_parameters": int(sum(p.numel() for p in other))}
    return groups, record


def _constructor(kind, params, args, graphs):
    """(optimizer class, its first argument, fixed keywords, the record's extra entries) for --optimizer."""
    if kind == "sgd":
        return torch.optim.SGD, params, {"lr": args.lr, "momentum": 0.9}, {}
    cls = getattr(torch.optim, "AdamW", None)
    if cls is None:
        raise Unsupported("this torch has no torch.optim.AdamW (PyTorch 1.2+)")
    groups, record = decay_groups(params)
    fixed = {"lr": args.lr, "betas": ADAMW_BETAS, "eps": ADAMW_EPS}
    if graphs:  # AdamW's step counter must live on the device for a CUDA graph to replay it
        if "capturable" not in accepted_kwargs(cls.__init__):
            raise Unsupported("this torch's AdamW cannot be captured in a CUDA graph (no capturable=True)")
        fixed["capturable"] = True
    return cls, groups, fixed, {"weight_decay": record}


def make_optimizer(params, args, device, allow_fused, dynamic_scaler=False):
    """--optimizer as optimizer_choices orders its implementations: (optimizer, implementation, why, the precision
    record's entries: "optimizer" and, for AdamW, "weight_decay"). A named implementation this torch or device lacks
    is Unsupported; auto falls through to the next."""
    params = [p for p in params if p.requires_grad]
    kind = getattr(args, "optimizer", "sgd")
    want = getattr(args, "optimizer_impl", "auto")
    cls, first, fixed, record = _constructor(kind, params, args, bool(getattr(args, "cuda_graphs", False)))
    accepted = accepted_kwargs(cls.__init__)
    choices, why = optimizer_choices(want, device.type, accepted, allow_fused, dynamic_scaler, kind)
    label = cls.__name__
    if want in ("fused", "foreach"):
        if want not in accepted:
            raise Unsupported("this torch's %s has no %s implementation" % (label, want))
        if want == "fused" and not allow_fused:
            raise Unsupported("fused %s cannot run under apex's amp, which patches the optimizer's step" % label)
    for impl, kwargs in choices:
        try:
            optimizer = cls(first, **dict(fixed, **kwargs))
        except (RuntimeError, ValueError, TypeError) as e:
            said = str(e).splitlines()[0] if str(e) else type(e).__name__
            if want != "auto":
                raise Unsupported("%s %s on %s: %s" % (label, want, device.type, said))
            log("%s %s unavailable here (%s); trying the next" % (label, impl, said))
            why += "; %s unavailable here (%s)" % (impl, said)
            continue
        return optimizer, impl, why, dict(record, optimizer="%s-%s" % (NAMES[kind], impl))
    raise Unsupported("no %s implementation constructs here: %s" % (label, why))
