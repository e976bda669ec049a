"""Which attention the transformer runs (--attention): the plain hand-written one, SDPA as PyTorch picks,
or one SDPA backend forced. A forced backend is probed once, forward and backward, with the model's head
size and the precision's dtype on the device: what this torch or device lacks is Unsupported with one
sentence, before any training."""

from .compat import F, first_line, torch
from .errors import Unsupported

# --attention -> the SDPBackend member (torch.nn.attention, PyTorch 2.3+) and the enable_* switch of the older
# torch.backends.cuda.sdp_kernel (PyTorch 2.0-2.2, which has no cuDNN backend).
BACKENDS = {"math": ("MATH", "enable_math"), "flash": ("FLASH_ATTENTION", "enable_flash"),
            "mem_efficient": ("EFFICIENT_ATTENTION", "enable_mem_efficient"),
            "cudnn": ("CUDNN_ATTENTION", None)}


def _kernel_context(backend):
    """A no-argument function returning the context that allows only `backend`, or Unsupported."""
    member, switch = BACKENDS[backend]
    attention = None
    try:
        import torch.nn.attention as attention
    except ImportError:
        pass
    if attention is not None and hasattr(attention, "sdpa_kernel"):
        chosen = getattr(attention.SDPBackend, member, None)
        if chosen is None:
            raise Unsupported("this torch %s has no %s backend for scaled_dot_product_attention "
                              "(torch.nn.attention.SDPBackend.%s)" % (torch.__version__, backend, member))
        return lambda: attention.sdpa_kernel(chosen)
    old = getattr(torch.backends.cuda, "sdp_kernel", None)
    if old is None or switch is None:
        raise Unsupported("this torch %s cannot choose the %s backend of scaled_dot_product_attention "
                          "(torch.nn.attention.sdpa_kernel: PyTorch 2.3+%s)" % (
                              torch.__version__, backend, "" if switch is None else "; sdp_kernel: 2.0+"))
    flags = dict((s, s == switch) for _, s in BACKENDS.values() if s is not None)
    return lambda: old(**flags)


def _probe(kernel, device, dtype, heads, head_dim, backend):
    """One causal SDPA forward and backward under `kernel`: the backend's refusal is Unsupported."""
    shape = (1, heads, 16, head_dim)
    q, k, v = (torch.randn(*shape, device=device, dtype=dtype).requires_grad_() for _ in range(3))
    try:
        with kernel():
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    except RuntimeError as e:
        raise Unsupported("the %s backend of scaled_dot_product_attention cannot run here (%s, %s, head size "
                          "%d): %s" % (backend, device.type, str(dtype).replace("torch.", ""), head_dim,
                                       first_line(e)))


def attention_plan(requested, device, dtype, heads, head_dim):
    """(sdpa function or None, kernel context factory or None, record) for --attention `requested`."""
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if requested == "plain" or (requested == "auto" and sdpa is None):
        return None, None, {"requested": requested, "ran": "plain"}
    if sdpa is None:
        raise Unsupported("this torch %s has no scaled_dot_product_attention (PyTorch 2.0+), so no %s backend; "
                          "--attention plain or auto runs the hand-written attention" % (
                              torch.__version__, requested))
    if requested == "auto":
        return sdpa, None, {"requested": "auto", "ran": "sdpa (PyTorch's choice)"}
    kernel = _kernel_context(requested)
    _probe(kernel, device, dtype, heads, head_dim, requested)
    return sdpa, kernel, {"requested": requested, "ran": "sdpa " + requested}
