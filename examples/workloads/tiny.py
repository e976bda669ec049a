"""The training the example workloads share: a small CNN learning a synthetic 10-class task on 28x28
images, on the CPU in seconds (or a GPU), optionally as several processes (env:// variables, gloo or
NCCL). Each example script logs it in another format; matrix parses each into the same result."""

import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def arguments(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3, help="the first one is warm-up for throughput")
    parser.add_argument("--steps", type=int, default=20, help="training steps per epoch")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "amp-bf16"])
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--label", default="", help="any text; printed back as received")
    parser.add_argument("--log-file", default="", help="dllogger: where the JSON stream goes")
    return parser.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class Run:
    """Model, data and optimizer for one process; `epoch()` trains `steps` batches and says how long."""

    def __init__(self, args):
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if torch.cuda.is_available() \
            else torch.device("cpu")
        if args.threads:
            torch.set_num_threads(args.threads)
        if self.world > 1:
            import torch.distributed as dist
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo", init_method="env://")
        torch.manual_seed(args.seed)
        # Each class is a fixed random template under noise: a task the model learns in a few dozen steps,
        # made here, no download.
        self.templates = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(1234))
        self.model = Net().to(self.device)
        if self.world > 1:
            self.model = nn.parallel.DistributedDataParallel(self.model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9)
        self.gen = torch.Generator().manual_seed(args.seed * 1000 + self.rank)
        self.test = self.batch(512)

    def batch(self, n):
        y = torch.randint(0, 10, (n,), generator=self.gen)
        x = 0.5 * self.templates[y] + torch.randn(n, 1, 28, 28, generator=self.gen)
        return x.to(self.device), y.to(self.device)

    def autocast(self):
        if self.args.precision == "amp-bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return _Null()

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def epoch(self):
        """Train `steps` batches; (seconds, samples over every process, last loss)."""
        batches = [self.batch(self.args.batch_size) for _ in range(self.args.steps)]
        if self.args.precision == "bf16":
            self.model.to(torch.bfloat16)
            batches = [(x.to(torch.bfloat16), y) for x, y in batches]
        self.sync()
        start = time.perf_counter()
        for x, y in batches:
            with self.autocast():
                loss = F.cross_entropy(self.model(x).float(), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        self.sync()
        return time.perf_counter() - start, self.args.steps * self.args.batch_size * self.world, float(loss.detach())

    def accuracy(self):
        x, y = self.test
        with torch.no_grad(), self.autocast():
            if self.args.precision == "bf16":
                x = x.to(torch.bfloat16)
            return float((self.model(x).argmax(1) == y).float().mean())

    def close(self):
        if self.world > 1:
            import torch.distributed as dist
            dist.destroy_process_group()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
