"""Did the training stay healthy: every loss finite (warm-up and window, every step), and the steps a dynamic loss
scaler skipped. Both are read once at the end of a phase, never with a host wait inside the loop: the losses are
kept by timing.LossKeeper, the skipped steps counted on the device (docs/admission.md).

A repeat whose loss became NaN or infinite is `diverged` (exit 5): its figures are kept for the record and no
command ranks them.
"""

import math

from .compat import log, torch
from .distributed import all_reduce_values

NO_STEP = 1e18  # "no non-finite loss" in the ranks' MIN


def first_nonfinite(losses):
    """The index of the first loss that is NaN or infinite (None: a missing loss is not a loss), or None."""
    for i, value in enumerate(losses):
        if value is not None and not math.isfinite(value):
            return i
    return None


class FiniteCheck(object):
    """Every training step's loss checked finite, phase by phase (warm-up, each window), the ranks agreeing: a
    repeat diverged when any rank's loss did, at the earliest such step of any rank."""

    def __init__(self, dist=None, device=None):
        self.dist, self.device = dist, device
        self.losses = []   # every checked step's loss (this rank), step k at index k - 1
        self.bad = None    # (step, phase) of the first non-finite loss

    def check(self, losses, phase):
        """Add a phase's losses; returns True when the training is (now) diverged, on every rank alike."""
        offset = len(self.losses)
        self.losses.extend(losses)
        mine = first_nonfinite(losses)
        step = NO_STEP if mine is None else offset + mine + 1
        if self.dist is not None:  # every rank must end the same way: the earliest non-finite step of any rank
            step = all_reduce_values(self.dist, [step], "MIN", self.device)[0]
        if self.bad is None and step < NO_STEP:
            self.bad = (int(step), phase)
        return self.bad is not None

    @property
    def diverged(self):
        return self.bad is not None

    def record(self):
        """metrics.finite: {"all": true, "checked_steps"} or, diverged, where it happened and the last finite loss
        before it."""
        out = {"all": self.bad is None, "checked_steps": len(self.losses)}
        if self.bad is None:
            return out
        step, phase = self.bad
        last = None
        for k in range(min(step - 1, len(self.losses)), 0, -1):
            value = self.losses[k - 1]
            if value is not None and math.isfinite(value):
                last = k
                break
        out.update(first_nonfinite_step=step, phase=phase, last_finite_step=last,
                   last_finite_loss=None if last is None else self.losses[last - 1])
        return out

    def reason(self):
        """The result's reason: "loss became nan at training step 7 (warm-up); last finite loss 6.91 at step 6"."""
        rec = self.record()
        step = rec["first_nonfinite_step"]
        value = self.losses[step - 1] if step <= len(self.losses) else None
        what = "became %s" % value if value is not None and not math.isfinite(value) else (
            "became NaN or infinite on another rank")
        text = "loss %s at training step %d (%s)" % (what, step, "warm-up" if rec["phase"] == "warmup" else "window")
        if rec["last_finite_step"] is None:
            return text + "; no finite loss before it"
        return text + "; last finite loss %.4g at step %d" % (rec["last_finite_loss"], rec["last_finite_step"])


class ScalerWatch(object):
    """The optimizer steps a dynamic loss scaler skipped (a gradient overflowed: the step is not taken and the scale
    backs off). Native GradScaler: the scale tensor compared before and after update() on the device, the count a
    device tensor read at the end of a phase. apex: its scaler's own overflow flag, a host value apex read anyway."""

    def __init__(self, impl, scaler=None, apex_amp=None):
        self.impl = impl
        self.scaler = scaler
        self.apex_amp = apex_amp
        self.count = None  # native: a device tensor, created at the first step
        self.host_count = 0
        self.why = None
        self.counts = {}

    def before_update(self):
        """The native scale before update(): a device copy, no wait (None where the scaler has no scale tensor)."""
        scale = getattr(self.scaler, "_scale", None)
        return scale.clone() if torch.is_tensor(scale) else None

    def after_update(self, before):
        scale = getattr(self.scaler, "_scale", None)
        if before is None or not torch.is_tensor(scale):
            self.why = "this torch's GradScaler keeps no scale tensor (_scale) to compare"
            return
        # A step backs the scale off when it skips; a scale already at 0 (every step overflowed ~166 times from
        # 2**16) cannot back off further, and with it no step trains: counted as skipped too.
        skipped = ((scale < before) | (scale <= 0)).int()
        if self.count is None:
            self.count = skipped
        else:
            self.count.add_(skipped)

    def after_apex_backward(self):
        scalers = _apex_scalers(self.apex_amp)
        if not scalers:
            self.why = "apex's loss scaler was not found (apex.amp._amp_state.loss_scalers)"
            return
        if any(getattr(s, "_has_overflow", False) for s in scalers):
            self.host_count += 1

    def take(self, phase, steps):
        """Read and reset the count of the phase that just ended (one read from the device)."""
        if self.impl == "native":
            value = int(self.count.item()) if self.count is not None else 0
            if self.count is not None:
                self.count.zero_()
        else:
            value = self.host_count
            self.host_count = 0
        self.counts[phase] = self.counts.get(phase, 0) + value
        if phase == "window":
            self.counts["window_steps"] = steps
        return value

    def scale(self):
        if self.impl == "native":
            scale = getattr(self.scaler, "_scale", None)
            return float(scale.item()) if torch.is_tensor(scale) else None
        scalers = _apex_scalers(self.apex_amp)
        if scalers and hasattr(scalers[0], "loss_scale"):
            return float(scalers[0].loss_scale())
        return None

    def record(self):
        """metrics.scaler: {"kind": "dynamic", "impl", "skipped_warmup", "skipped_resized" (the windows re-sized
        away), "skipped_window", "window_steps", "scale_end"} (counts None where they could not be read, with why)."""
        unknown = self.why is not None
        out = {"kind": "dynamic", "impl": self.impl,
               "skipped_warmup": None if unknown else self.counts.get("warmup", 0),
               "skipped_resized": None if unknown else self.counts.get("resized", 0),
               "skipped_window": None if unknown else self.counts.get("window", 0),
               "window_steps": self.counts.get("window_steps", 0), "scale_end": self.scale()}
        if unknown:
            out["why"] = self.why
        return out

    def log_window(self):
        rec = self.record()
        if rec["skipped_window"]:
            log("the loss scaler skipped %d of the window's %d optimizer steps (gradients overflowed; scale now %s)"
                % (rec["skipped_window"], rec["window_steps"], rec["scale_end"]))


def _apex_scalers(apex_amp):
    """apex's loss scalers: amp.initialize's (apex.amp._amp_state.loss_scalers), or the 2018 handle's own."""
    state = getattr(apex_amp, "_amp_state", None)
    scalers = getattr(state, "loss_scalers", None)
    if scalers:
        return list(scalers)
    own = getattr(apex_amp, "_default_scaler", None)
    return [own] if own is not None else []
