"""The data: a pool of synthetic batches made once on the device, or a real data set (npz, CIFAR-10
python batches, an ImageFolder) through a seeded DataLoader, sharded over ranks; for a transformer,
synthetic tokens or the bytes of a text file (load_tokens)."""

import os

from .compat import accepted_kwargs, optional_module, torch
from .errors import BadArgs, Unsupported


class _TensorPairs(object):
    """(x, y) pairs from two tensors: TensorDataset without its version differences."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return int(self.x.size(0))

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def _require_numpy(kind):
    np = optional_module("numpy")
    if np is None:
        raise Unsupported("dataset %s needs numpy, which is not importable here" % kind)
    return np


def _to_nchw(np, x, where):
    """N,C,H,W or N,H,W or N,H,W,C -> N,C,H,W (a channel axis is 1, 3 or 4 wide)."""
    if x.ndim == 3:
        return x[:, None, :, :]
    if x.ndim != 4:
        raise BadArgs("%s: images must be N,C,H,W or N,H,W[,C], got shape %s" % (where, tuple(x.shape)))
    if x.shape[1] not in (1, 3, 4) and x.shape[3] in (1, 3, 4):
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x


def _images_tensor(np, x, where):
    """Keep uint8 as uint8 (scaled to [0,1] on the device, 4x less copying); anything else float32."""
    x = _to_nchw(np, np.asarray(x), where)
    if x.dtype == np.uint8:
        return torch.from_numpy(np.ascontiguousarray(x))
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def _labels_tensor(np, y, n, where):
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:  # one-hot
        y = y.argmax(axis=1)
    y = y.reshape(-1)
    if y.shape[0] != n:
        raise BadArgs("%s: %d labels for %d images" % (where, y.shape[0], n))
    if y.size and (y.min() < 0 or np.any(y != np.floor(y))):
        raise BadArgs("%s: labels must be non-negative integers" % where)
    return torch.from_numpy(y.astype(np.int64))


def load_npz(path):
    np = _require_numpy("npz")
    try:
        data = np.load(path)
        arrays = dict((k, data[k]) for k in ("x_train", "y_train", "x_test", "y_test"))
    except KeyError as e:
        raise BadArgs("npz:%s lacks array %s (needs x_train, y_train, x_test, y_test)" % (path, e))
    except Exception as e:
        raise BadArgs("npz:%s cannot be read: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))
    out = []
    for split in ("train", "test"):
        where = "npz:%s x_%s" % (path, split)
        x = _images_tensor(np, arrays["x_" + split], where)
        out.append((x, _labels_tensor(np, arrays["y_" + split], x.size(0), where)))
    return out


def load_cifar10(path):
    """The python-pickle CIFAR-10 batches (data_batch_1..5, test_batch), in DIR or DIR/cifar-10-batches-py."""
    import pickle
    np = _require_numpy("cifar10")
    if os.path.isdir(os.path.join(path, "cifar-10-batches-py")):
        path = os.path.join(path, "cifar-10-batches-py")
    splits = {"train": ["data_batch_%d" % i for i in range(1, 6)], "test": ["test_batch"]}
    out = []
    for split in ("train", "test"):
        xs, ys = [], []
        for name in splits[split]:
            fname = os.path.join(path, name)
            if not os.path.isfile(fname):
                raise BadArgs("cifar10:%s: missing %s" % (path, name))
            try:
                with open(fname, "rb") as f:
                    batch = pickle.load(f, encoding="bytes")
                xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
                ys.append(np.asarray(batch[b"labels"], dtype=np.int64))
            except Exception as e:
                raise BadArgs("cifar10:%s: cannot read %s: %s" % (path, name, e))
        x = torch.from_numpy(np.ascontiguousarray(np.concatenate(xs)))
        out.append((x, torch.from_numpy(np.concatenate(ys))))
    return out


def load_imagefolder(path, size):
    """torchvision ImageFolder: DIR/train + DIR/val, or DIR itself for both."""
    datasets = optional_module("torchvision.datasets")
    T = optional_module("torchvision.transforms")
    if datasets is None or T is None:
        raise Unsupported("dataset imagefolder needs torchvision, which is not importable here")
    train_dir, val_dir = os.path.join(path, "train"), os.path.join(path, "val")
    if not (os.path.isdir(train_dir) and os.path.isdir(val_dir)):
        train_dir = val_dir = path
    norm = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    val_tf = T.Compose([T.Resize(int(round(size * 256.0 / 224))), T.CenterCrop(size), T.ToTensor(), norm])
    try:
        train = datasets.ImageFolder(train_dir, transform=train_tf)
        test = datasets.ImageFolder(val_dir, transform=val_tf)
    except (RuntimeError, FileNotFoundError, OSError) as e:
        raise BadArgs("imagefolder:%s: %s" % (path, str(e).splitlines()[0]))
    return train, test, len(train.classes)


class SyntheticSource(object):
    """A fixed pool of random batches made once on the device: no loader, no copies in the loop."""

    def __init__(self, pool):
        self.pool = pool
        self.i = 0

    def next(self):
        batch = self.pool[self.i]
        self.i = (self.i + 1) % len(self.pool)
        return batch


class LoaderSource(object):
    """Batches from a DataLoader, copied to the device; a new epoch starts when one runs out."""

    def __init__(self, loader, sampler, prepare, device):
        self.loader, self.sampler, self.prepare, self.device = loader, sampler, prepare, device
        self.epoch = 0
        self.it = iter(loader)

    def next(self):
        try:
            x, y = next(self.it)
        except StopIteration:
            self.epoch += 1
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(self.epoch)
            self.it = iter(self.loader)
            x, y = next(self.it)
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        return self.prepare(x), y


def make_prepare(plan, args):
    """Device-side input conversion: uint8 -> [0,1], the model's dtype, the memory format."""
    dtype = plan["input_dtype"]
    channels_last = args.channels_last

    def prepare(x):
        if x.dtype == torch.uint8:
            x = x.to(dtype or torch.float32).div_(255)
        elif dtype is not None and x.dtype != dtype:
            x = x.to(dtype)
        if channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x
    return prepare


def loader_kwargs(args, device, generator_seed, shuffle):
    kwargs = {"num_workers": args.workers, "pin_memory": device.type == "cuda"}
    accepted = accepted_kwargs(torch.utils.data.DataLoader.__init__)
    if shuffle and generator_seed is not None and "generator" in accepted:
        g = torch.Generator()
        g.manual_seed(generator_seed)
        kwargs["generator"] = g
    if args.workers > 0 and "persistent_workers" in accepted:
        kwargs["persistent_workers"] = True  # no worker re-spawn at each new epoch
    return kwargs


def make_train_source(train_ds, args, device, prepare, dist_info):
    """A shuffled (seeded), drop_last DataLoader over this rank's shard."""
    from torch.utils.data import DataLoader
    rank, world, _ = dist_info
    sampler = None
    if world > 1:
        from torch.utils.data.distributed import DistributedSampler
        skw = {"num_replicas": world, "rank": rank}
        accepted = accepted_kwargs(DistributedSampler.__init__)
        for key, value in (("shuffle", True), ("seed", args.seed)):  # shuffles by default; seed: 1.6+
            if key in accepted:
                skw[key] = value
        sampler = DistributedSampler(train_ds, **skw)
    per_rank = len(train_ds) // world
    if per_rank < args.batch_size:
        raise BadArgs("dataset %s has %d training samples per process, fewer than --batch-size %d"
                      % (args.dataset, per_rank, args.batch_size))
    loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
                        drop_last=True, **loader_kwargs(args, device, args.seed, sampler is None))
    return LoaderSource(loader, sampler, prepare, device)


def load_data(args, device, plan, model_shape, dist_info):
    """Training source, test set and the shape the model must take: (source, test_ds, channels,
    (H, W), num_classes, info)."""
    kind, path = args.data_kind, args.data_path
    channels, default_size, default_classes = model_shape
    prepare = make_prepare(plan, args)
    if kind == "synthetic":
        size = args.image_size or default_size
        classes = args.num_classes or default_classes
        pool = []
        for _ in range(args.synthetic_batches):
            x = torch.randn(args.batch_size, channels, size, size, device=device)
            y = torch.randint(0, classes, (args.batch_size,), device=device, dtype=torch.long)
            pool.append((prepare(x), y))
        return SyntheticSource(pool), None, channels, (size, size), classes, {"train_samples": None,
                                                                             "test_samples": None}
    if kind == "imagefolder":
        size = args.image_size or default_size
        train_ds, test_ds, classes = load_imagefolder(path, size)
        channels_data, hw = 3, (size, size)
    else:
        (xtr, ytr), (xte, yte) = load_npz(path) if kind == "npz" else load_cifar10(path)
        if xtr.shape[1:] != xte.shape[1:]:
            raise BadArgs("%s: train images %s and test images %s differ in shape"
                          % (args.dataset, tuple(xtr.shape[1:]), tuple(xte.shape[1:])))
        channels_data, hw = int(xtr.size(1)), (int(xtr.size(2)), int(xtr.size(3)))
        if args.image_size is not None and (args.image_size, args.image_size) != hw:
            raise BadArgs("%s has %dx%d images but --image-size is %d" % (args.dataset, hw[0], hw[1],
                                                                          args.image_size))
        classes = int(max(int(ytr.max()) if ytr.numel() else 0, int(yte.max()) if yte.numel() else 0)) + 1
        train_ds, test_ds = _TensorPairs(xtr, ytr), _TensorPairs(xte, yte)
    if args.num_classes is not None:
        if args.num_classes < classes:
            raise BadArgs("%s has labels up to %d but --num-classes is %d" % (args.dataset, classes - 1,
                                                                             args.num_classes))
        classes = args.num_classes
    source = make_train_source(train_ds, args, device, prepare, dist_info)
    info = {"train_samples": len(train_ds), "test_samples": len(test_ds)}
    return source, test_ds, channels_data, hw, classes, info


class TextSource(object):
    """Next-token batches from one byte string on the device: each batch takes --batch-size windows of
    seq_len + 1 bytes at offsets drawn from a seeded generator (per rank), inputs the first seq_len bytes,
    targets the last seq_len, flattened as the model's logits are."""

    def __init__(self, tokens, batch_size, seq_len, seed):
        self.tokens = tokens
        self.batch_size, self.seq_len = batch_size, seq_len
        self.span = torch.arange(seq_len + 1, device=tokens.device)
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)

    def next(self):
        starts = torch.randint(0, int(self.tokens.size(0)) - self.seq_len, (self.batch_size,),
                               generator=self.generator).to(self.tokens.device)
        window = self.tokens[starts.view(-1, 1) + self.span].long()
        return window[:, :-1], window[:, 1:].reshape(-1)


def read_text_tokens(path, seq_len):
    """The bytes of a text file as a uint8 tensor (byte-level tokens: ids 0-255), at least seq_len + 2 of them
    (one window of seq_len + 1 bytes and a second offset to draw)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except (OSError, IOError) as e:
        raise BadArgs("text:%s cannot be read: %s" % (path, e))
    if len(raw) < seq_len + 2:
        raise BadArgs("text:%s has %d bytes; --seq-len %d needs at least %d" % (path, len(raw), seq_len,
                                                                                 seq_len + 2))
    np = optional_module("numpy")
    if np is not None:
        return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy())
    return torch.tensor(bytearray(raw), dtype=torch.uint8)


def load_tokens(args, device, vocab, dist_info):
    """The transformer's training source and what the result says of it: synthetic tokens (a pool of random
    sequences made once on the device, as for images) or text:PATH read once and sampled on the device."""
    rank = dist_info[0]
    b, t = args.batch_size, args.seq_len
    if args.data_kind == "synthetic":
        pool = []
        for _ in range(args.synthetic_batches):
            seq = torch.randint(0, vocab, (b, t + 1), device=device, dtype=torch.long)
            pool.append((seq[:, :-1].contiguous(), seq[:, 1:].reshape(-1)))
        return SyntheticSource(pool), {"train_samples": None, "test_samples": None, "tokens": "synthetic",
                                       "vocabulary": vocab}
    tokens = read_text_tokens(args.data_path, t)
    source = TextSource(tokens.to(device), b, t, args.seed + rank)
    return source, {"train_samples": int(tokens.size(0)), "test_samples": None, "tokens": "bytes",
                    "vocabulary": vocab}


class Shard(object):
    """Every world-th sample starting at rank: an exact, non-padded split of the test set."""

    def __init__(self, ds, rank, world):
        self.ds = ds
        self.indices = list(range(rank, len(ds), world))

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return self.ds[self.indices[i]]
