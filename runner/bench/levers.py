"""The transformer's speed levers: the loss over the vocabulary in chunks (--loss-impl chunked) and activation
checkpointing per block (--checkpoint). Each is refused with one sentence where it cannot do what it says (a model
with no transformer blocks, an FP8 output projection), never left to do nothing."""

from .compat import F, first_line, optional_module, torch
from .contract import TRANSFORMER_MODELS
from .errors import Unsupported

# Rows (tokens) of the logits a chunk holds: 4,096 x 50,304 in FP32 is 0.8 GB, where GPT-2 124M's 32 x 1,024 tokens
# make a 6.6 GB FP32 logits tensor (and as much again for its gradient) in the plain loss.
CE_CHUNK_ROWS = 4096

_Function = torch.autograd.Function if torch is not None else object


class ChunkedCrossEntropy(_Function):
    """mean cross-entropy(hidden @ weight^T, targets) a chunk of rows at a time, the gradients of each chunk computed
    in the forward (the logits' gradient is softmax - one-hot: nothing of a chunk need be kept), so the full logits
    tensor is never held, in FP32 or otherwise. Under autocast the two matrix products of each chunk run in its
    dtype, as the plain loss's do; the softmax is FP32, as cross_entropy's is under autocast. The kept gradients are
    FP32 and not yet divided by the rows: the backward applies 1/rows and the loss's own gradient (an FP16 loss scale
    among it) before casting, so no FP16 gradient underflows before the scale reaches it."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, rows):
        n = hidden.size(0)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty(hidden.size(), dtype=torch.float32, device=hidden.device)
        grad_weight = torch.zeros(weight.size(), dtype=torch.float32, device=weight.device)
        for start in range(0, n, rows):
            h, t = hidden[start:start + rows], targets[start:start + rows].view(-1, 1)
            raw = torch.matmul(h, weight.t())  # autocast's dtype where it is on, as the plain head's
            logp = F.log_softmax(raw.float(), dim=-1)
            total = total - logp.gather(1, t).sum()
            grad = logp.exp_()  # softmax - one-hot, in place of the log-probabilities: |values| <= 1 in any dtype
            grad.scatter_add_(1, t, torch.full(t.size(), -1.0, dtype=grad.dtype, device=grad.device))
            grad = grad.to(raw.dtype)
            grad_hidden[start:start + rows] = torch.matmul(grad, weight).float()
            grad_weight += torch.matmul(grad.t(), h).float()
        ctx.grads = (grad_hidden, grad_weight, n, hidden.dtype, weight.dtype)  # made without autograd: no graph
        return total / n

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight, n, hidden_dtype, weight_dtype = ctx.grads
        del ctx.grads
        scale = grad_loss.float() / n
        return (grad_hidden * scale).to(hidden_dtype), (grad_weight * scale).to(weight_dtype), None, None


def chunked_loss(weight, rows=None):
    """criterion(hidden, targets) for a model that returns its final hidden states: the chunked cross-entropy over
    the output projection `weight` (the GPT's tied token embedding), CE_CHUNK_ROWS rows a chunk unless `rows`."""
    rows = rows or CE_CHUNK_ROWS

    def criterion(hidden, targets):
        return ChunkedCrossEntropy.apply(hidden, weight, targets, rows)
    return criterion


def check_levers(args, plan):
    """Unsupported, with one sentence, where --loss-impl chunked or --checkpoint would do nothing (a model without
    transformer blocks) or something else than asked (fp8's output projection is an FP8 linear layer, which the
    chunked loss would bypass)."""
    transformer = args.model in TRANSFORMER_MODELS
    if getattr(args, "loss_impl", "plain") == "chunked":
        if not transformer:
            raise Unsupported("--loss-impl chunked splits a transformer's output projection over its tokens; model %s "
                              "has none (it applies to %s)" % (args.model, ", ".join(sorted(TRANSFORMER_MODELS))))
        if plan["precision"] == "fp8":
            raise Unsupported("--loss-impl chunked computes the output projection itself, in BF16; with fp8 that "
                              "projection is an FP8 linear layer: loss_impl plain measures it")
    if getattr(args, "checkpoint", False) and not transformer:
        raise Unsupported("--checkpoint recomputes each transformer block's activations; model %s has no blocks to "
                          "wrap (it applies to %s)" % (args.model, ", ".join(sorted(TRANSFORMER_MODELS))))


def checkpoint_function():
    """(function(block, x) -> block(x) with its activations recomputed in the backward, how it is called): torch's
    non-reentrant checkpoint where it takes `use_reentrant` (the reentrant one needs inputs that require grad and does
    not compose with torch.compile), without saving the RNG state where it takes `preserve_rng_state` (the GPT has no
    dropout; a CUDA graph cannot read the generator's state on the host). Both probed by a call."""
    module = optional_module("torch.utils.checkpoint")
    if module is None or not hasattr(module, "checkpoint"):
        raise Unsupported("this torch has no torch.utils.checkpoint")
    kwargs, refused = {}, []
    for key, value in (("use_reentrant", False), ("preserve_rng_state", False)):
        trial = dict(kwargs)
        trial[key] = value
        x = torch.ones(2, requires_grad=True)
        try:
            module.checkpoint(lambda z: z * 2.0, x, **trial).sum().backward()
        except (TypeError, ValueError, RuntimeError) as e:
            refused.append("%s (%s)" % (key, first_line(e)))
            continue
        kwargs = trial
    how = "torch.utils.checkpoint(%s)" % ", ".join("%s=%s" % kv for kv in sorted(kwargs.items()))
    if refused:
        how += "; this torch's checkpoint refused " + ", ".join(refused)
    return (lambda block, x: module.checkpoint(block, x, **kwargs)), how


def apply_checkpoint(model):
    """Turn checkpointing on in the GPT's blocks; the record says how, and over how many blocks."""
    blocks = getattr(model, "blocks", None)
    if not blocks:
        raise Unsupported("--checkpoint found no transformer blocks in %s" % type(model).__name__)
    fn, how = checkpoint_function()
    model.checkpoint = fn
    return {"checkpoint_how": "%s around each of %d blocks" % (how, len(blocks))}
