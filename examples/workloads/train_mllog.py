"""The tiny training (tiny.py) logged as an MLPerf reference logs it: `:::MLLOG {json}` lines through
mlperf-logging's mllog (pip install mlperf-logging). Run it with `parser: mllog`.

Where mlperf_logging is not importable (an image without it) the script says so on stderr and writes
the same line format itself, so the example still runs; give the package as a workload file to use it
there too (tests/backends/workloads do)."""

import json
import sys
import time

import tiny

try:
    from mlperf_logging import mllog
except ImportError:
    mllog = None


class _Fallback:
    """mllog's line format (namespace, time_ms, event_type, key, value, metadata) without the package."""

    def _log(self, kind, key, value=None, metadata=None):
        record = {"namespace": "", "time_ms": int(time.time() * 1e3), "event_type": kind, "key": key,
                  "value": value, "metadata": dict(metadata or {}, file=__file__)}
        print(":::MLLOG " + json.dumps(record), flush=True)

    def start(self, key, value=None, metadata=None):
        self._log("INTERVAL_START", key, value, metadata)

    def end(self, key, value=None, metadata=None):
        self._log("INTERVAL_END", key, value, metadata)

    def event(self, key, value=None, metadata=None):
        self._log("POINT_IN_TIME", key, value, metadata)


def main():
    args = tiny.arguments(__doc__)
    if mllog is not None:
        logger = mllog.get_mllogger()
        print("mllog: mlperf-logging", file=sys.stderr)
    else:
        logger = _Fallback()
        print("mllog: mlperf_logging is not importable here; writing its line format directly", file=sys.stderr)
    run = tiny.Run(args)
    log = logger if run.rank == 0 else None  # one process logs, as MLPerf references do
    if log:
        log.event(key="submission_benchmark", value="tiny-cnn")
        log.event(key="global_batch_size", value=args.batch_size * run.world)
        log.event(key="seed", value=args.seed)
        log.start(key="run_start")
    samples = 0
    for epoch in range(args.epochs):
        if log:
            log.start(key="epoch_start", metadata={"epoch_num": epoch})
        seconds, n, loss = run.epoch()
        samples += n
        if log:
            log.end(key="epoch_stop", metadata={"epoch_num": epoch})
            log.event(key="tracked_stats", value={"throughput": n / seconds, "loss": loss}, metadata={"step": epoch})
    accuracy = run.accuracy()
    if log:
        log.event(key="eval_accuracy", value=accuracy, metadata={"epoch_num": args.epochs})
        log.event(key="train_samples", value=samples)
        log.end(key="run_stop", metadata={"status": "success"})
    run.close()


if __name__ == "__main__":
    main()
