"""A user's program that reports its training losses in one of the formats matrix's parsers read: MLPerf logging
(through the real mlperf-logging), DLLogger's JSON stream, plain lines for a pattern, or matrix_bench.measure.

    python losses.py FORMAT --losses 2.3,nan,1.9,1.8     print these losses, one a step (nan, inf, -inf as Python
                                                         and json write them)
    python losses.py FORMAT --train LR --steps N         train a tiny MLP with SGD at learning rate LR for N steps
                                                         and report its real losses
    --strict                                             write a NaN or an infinity as null, as a strict JSON
                                                         encoder (orjson) does (mllog, dllogger, measure)
    --step-key KEY --summary-loss X                      dllogger: the per-step loss under KEY (default
                                                         train.loss), the summary's train.loss X (default the last)

FORMAT: mllog, dllogger, pattern or measure. Every step takes at least 10 ms and reports the throughput of 64
samples in 10 ms."""

import argparse
import json
import math
import sys
import time

RATE = 6400.0  # 64 samples a step, a step at least STEP_S long
STEP_S = 0.01


def trained(lr, steps):
    """The losses of a real training: a 2-layer MLP on a fixed random 10-class task, SGD at `lr`."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    out = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
        time.sleep(STEP_S)
    return out


def strict(losses):
    """The losses as a strict JSON encoder writes them: a NaN or an infinity is null (orjson, json with allow_nan
    off and a default)."""
    return [v if isinstance(v, float) and math.isfinite(v) else None for v in losses]


def mllog(losses):
    from mlperf_logging import mllog as ml

    log = ml.get_mllogger()
    log.start(key="run_start")
    for step, loss in enumerate(losses):
        time.sleep(STEP_S)
        log.event(key="tracked_stats", value={"throughput": RATE, "loss": loss}, metadata={"step": step})
    log.event(key="train_samples", value=64 * len(losses))
    log.end(key="run_stop", metadata={"status": "success"})


def dllogger(losses, step_key="train.loss", summary_loss=None):
    for step, loss in enumerate(losses):  # json.dumps writes NaN and Infinity, as dllogger's JSONStreamBackend does
        print("DLLL " + json.dumps({"type": "LOG", "step": [step], "data": {step_key: loss, "train.ips": RATE}}))
    final = losses[-1] if summary_loss is None else summary_loss
    print("DLLL " + json.dumps({"type": "LOG", "step": [], "data": {"train.total_ips": RATE, "train.loss": final}}))


def pattern(losses):
    for step, loss in enumerate(losses):
        print(f"step {step}: loss {loss}, throughput {RATE} samples/s")


def measure(losses):
    from matrix_bench import measure as m

    window = m.start("cpu")
    time.sleep(STEP_S * len(losses))
    m.stop(window)
    m.report(window, items=64 * len(losses), iterations=len(losses), loss=losses[-1], losses=losses, unit="samples")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("format", choices=["mllog", "dllogger", "pattern", "measure"])
    p.add_argument("--losses", default="")
    p.add_argument("--train", type=float, default=None, help="the learning rate of a real training")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--strict", action="store_true", help="a NaN or an infinity written as null")
    p.add_argument("--step-key", default="train.loss", help="dllogger: the per-step loss key")
    p.add_argument("--summary-loss", type=float, default=None, help="dllogger: the summary's train.loss")
    args = p.parse_args()
    losses = trained(args.train, args.steps) if args.train is not None else [float(v) for v in args.losses.split(",")]
    print(f"losses: {losses}", file=sys.stderr)
    if args.strict:
        losses = strict(losses)
    if args.format == "dllogger":
        dllogger(losses, args.step_key, args.summary_loss)
    else:
        {"mllog": mllog, "pattern": pattern, "measure": measure}[args.format](losses)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
