"""The models: torchvision's by name, built-in ones that need nothing but torch (mnist_cnn, mlp,
cifar_vgg16, wrn), each sized to the data's channels, image size and classes, and the GPT-2 family of
decoder-only transformers (gpt_*: sizes in contract.TRANSFORMER_MODELS)."""

import importlib
import math

from .compat import IMPORT_ERRORS, F, first_line, nn, optional_module, torch, version_of
from .contract import BUILTIN_MODELS, TORCHVISION_MODELS, TRANSFORMER_MODELS
from .errors import Unsupported

_Module = nn.Module if nn is not None else object


class MnistCNN(_Module):
    """PyTorch's examples/mnist network: 2 conv + 2 fc; the fc size follows the input size."""

    def __init__(self, in_channels=1, size=(28, 28), num_classes=10):
        super(MnistCNN, self).__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64 * ((size[0] - 4) // 2) * ((size[1] - 4) // 2), 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = x.reshape(x.size(0), -1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return self.fc2(x)


class CifarVGG16(_Module):
    """VGG16 with batch norm for 32x32 inputs: 13 conv layers, one linear classifier."""

    CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

    def __init__(self, in_channels=3, num_classes=10):
        super(CifarVGG16, self).__init__()
        layers = []
        c = in_channels
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                c = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.pool(self.features(x))
        return self.classifier(x.reshape(x.size(0), -1))


class WideBasic(_Module):
    """Pre-activation wide residual block (Zagoruyko & Komodakis 2016)."""

    def __init__(self, in_planes, planes, stride):
        super(WideBasic, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)

    def forward(self, x):
        o = F.relu(self.bn1(x))
        shortcut = x if self.shortcut is None else self.shortcut(o)
        y = self.conv1(o)
        y = self.conv2(F.relu(self.bn2(y)))
        return y + shortcut


class WideResNet(_Module):
    """CIFAR WRN-depth-width: three groups of (depth-4)/6 blocks, widths 16k, 32k, 64k."""

    def __init__(self, depth=28, width=10, in_channels=3, num_classes=10):
        super(WideResNet, self).__init__()
        n = (depth - 4) // 6
        widths = [16, 16 * width, 32 * width, 64 * width]
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)
        blocks = []
        in_planes = widths[0]
        for group, stride in zip((1, 2, 3), (1, 2, 2)):
            for i in range(n):
                blocks.append(WideBasic(in_planes, widths[group], stride if i == 0 else 1))
                in_planes = widths[group]
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(in_planes)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.blocks(self.conv1(x))))
        x = self.pool(x)
        return self.fc(x.reshape(x.size(0), -1))


class MLP(_Module):
    """A tiny two-layer perceptron: the fastest thing that still trains, for tests."""

    def __init__(self, in_features, num_classes=10, hidden=256):
        super(MLP, self).__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.reshape(x.size(0), -1))))


def _gelu():
    """GPT-2's GELU (the tanh approximation) where F.gelu takes it, else the exact one, else by hand
    (PyTorch < 1.2 has no F.gelu)."""
    gelu = getattr(F, "gelu", None)
    if gelu is not None:
        try:
            gelu(torch.zeros(1), approximate="tanh")
            return lambda x: gelu(x, approximate="tanh")
        except TypeError:
            return gelu
    c = math.sqrt(2.0 / math.pi)
    return lambda x: 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x * x * x)))


class CausalSelfAttention(_Module):
    """Multi-head causal self-attention: scaled_dot_product_attention(is_causal) where `sdpa` is given,
    else the plain softmax(QK^T / sqrt(d) + mask) V that every torch runs."""

    def __init__(self, width, heads, context, sdpa):
        super(CausalSelfAttention, self).__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.heads = heads
        self.sdpa = sdpa
        if sdpa is None:  # an additive mask: -inf above the diagonal (bool masks need PyTorch 1.2)
            self.register_buffer("mask", torch.full((context, context), float("-inf")).triu(1))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, 2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(*shape).transpose(1, 2) for z in (q, k, v))
        if self.sdpa is not None:
            y = self.sdpa(q, k, v, is_causal=True)
        else:
            att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
            y = torch.matmul(F.softmax(att + self.mask[:t, :t], dim=-1), v)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(_Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x)) with a 4x GELU MLP."""

    def __init__(self, width, heads, context, sdpa, gelu):
        super(Block, self).__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context, sdpa)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)
        self.gelu = gelu

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.gelu(self.fc(self.ln2(x))))


class GPT(_Module):
    """GPT-2: token and learned position embeddings, pre-LN blocks, a final LayerNorm and an output
    projection tied to the token embedding. forward(tokens (B, T)) returns the logits of every position
    as rows, (B*T, vocabulary), so the classification loss of the other models applies unchanged (with the chunked
    loss, the final hidden states as rows, (B*T, width))."""

    def __init__(self, layers, heads, width, context, vocab, sdpa=None, kernel=None):
        super(GPT, self).__init__()
        gelu = _gelu()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList([Block(width, heads, context, sdpa, gelu) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.kernel = kernel  # a no-argument function returning the SDPA backend's context, or None
        self.checkpoint = None  # --checkpoint: function(block, x) recomputing the block's activations (levers.py)
        self.hidden_only = False  # --loss-impl chunked: forward returns the final hidden states, not the logits
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def _forward(self, idx):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x) if self.checkpoint is None else self.checkpoint(block, x)
        x = self.ln_f(x)
        if self.hidden_only:  # the chunked loss applies the output projection itself (levers.py)
            return x.view(-1, x.size(-1))
        logits = self.head(x)
        return logits.view(-1, logits.size(-1))

    def forward(self, idx):
        if self.kernel is None:
            return self._forward(idx)
        with self.kernel():
            return self._forward(idx)


def build_transformer(name, sdpa=None, kernel=None):
    layers, heads, width, context, vocab = TRANSFORMER_MODELS[name]
    return GPT(layers, heads, width, context, vocab, sdpa, kernel)


def check_model_available(name):
    """Raise Unsupported when this environment cannot build `name` (torchvision missing or too old)."""
    if name in BUILTIN_MODELS or name in TRANSFORMER_MODELS:
        return
    models = optional_module("torchvision.models")
    if models is None:
        raise Unsupported("model %s needs torchvision, which is not importable here (%s)" % (
            name, IMPORT_ERRORS.get("torchvision.models", "no module")))
    if not callable(getattr(models, name, None)):
        raise Unsupported("model %s is not in this torchvision (%s)" % (
            name, version_of(optional_module("torchvision"))))


def model_defaults(name):
    """(channels, image size, classes) the model naturally takes."""
    return (BUILTIN_MODELS.get(name) or TORCHVISION_MODELS[name])


def build_model(name, args, channels, size, num_classes):
    """The model for inputs of shape (channels, *size) and `num_classes` outputs."""
    if name == "mnist_cnn":
        return MnistCNN(channels, size, num_classes)
    if name == "cifar_vgg16":
        return CifarVGG16(channels, num_classes)
    if name == "wrn":
        return WideResNet(args.wrn_depth, args.wrn_width, channels, num_classes)
    if name == "mlp":
        return MLP(channels * size[0] * size[1], num_classes)
    if channels != 3:
        raise Unsupported("torchvision model %s takes 3-channel input, the data has %d" % (name, channels))
    models = importlib.import_module("torchvision.models")
    return getattr(models, name)(num_classes=num_classes)


def check_input_size(model, name, channels, hw):
    """Raise Unsupported when a torchvision model cannot take this input size (torchvision 0.2's
    resnets end in a fixed 7x7 average pool, so only 224 px fits): one FP32 forward of one image."""
    if name not in TORCHVISION_MODELS or tuple(hw) == (TORCHVISION_MODELS[name][1],) * 2:
        return
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, channels, hw[0], hw[1]))
    except (RuntimeError, ValueError) as e:
        raise Unsupported("model %s of torchvision %s cannot take %dx%d input: %s" % (
            name, version_of(optional_module("torchvision")), hw[0], hw[1], first_line(e)))
    finally:
        model.train(was_training)
