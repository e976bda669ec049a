"""A training run written for the tests: a small MLP on a synthetic task, logged through the real
mlperf-logging package (no fallback: an environment without it fails, which the tests would see), on one
process or several (env://, gloo). Prints the --label it received as JSON, so a test can hold the argv
to what matrix was given."""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from mlperf_logging import mllog

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--label", default="")
args = parser.parse_args()
print("received argv: " + json.dumps(sys.argv[1:]), flush=True)

rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
if world > 1:
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://")
    model = torch.nn.parallel.DistributedDataParallel(model)
    print(f"rank {rank} of {world} on {os.uname()[1]}", flush=True)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
centers = torch.randn(4, 64, generator=torch.Generator().manual_seed(7))
gen = torch.Generator().manual_seed(rank)


def batch(n):
    y = torch.randint(0, 4, (n,), generator=gen)
    return centers[y] + 0.5 * torch.randn(n, 64, generator=gen), y


log = mllog.get_mllogger() if rank == 0 else None
if log:
    log.event(key=mllog.constants.GLOBAL_BATCH_SIZE, value=args.batch_size * world)
    log.start(key=mllog.constants.RUN_START)
samples = 0
for epoch in range(args.epochs):
    start = time.perf_counter()
    for _ in range(args.steps):
        x, y = batch(args.batch_size)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    n = args.steps * args.batch_size * world
    samples += n
    if log:
        log.event(key="tracked_stats", value={"throughput": n / (time.perf_counter() - start),
                                              "loss": float(loss.detach())}, metadata={"step": epoch})
with torch.no_grad():
    x, y = batch(256)
    accuracy = float((model(x).argmax(1) == y).float().mean())
if log:
    log.event(key=mllog.constants.EVAL_ACCURACY, value=accuracy, metadata={"epoch_num": args.epochs})
    log.event(key=mllog.constants.TRAIN_SAMPLES, value=samples)
    log.end(key=mllog.constants.RUN_STOP, metadata={"status": "success"})
if world > 1:
    dist.destroy_process_group()
