"""The models: torchvision's by name, and built-in ones that need nothing but torch (mnist_cnn, mlp,
cifar_vgg16, wrn), each sized to the data's channels, image size and classes."""

import importlib

from .compat import IMPORT_ERRORS, F, first_line, nn, optional_module, torch, version_of
from .contract import BUILTIN_MODELS, TORCHVISION_MODELS
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


def check_model_available(name):
    """Raise Unsupported when this environment cannot build `name` (torchvision missing or too old)."""
    if name in BUILTIN_MODELS:
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
