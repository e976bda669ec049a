"""The tiny training (tiny.py) logged as NVIDIA's DeepLearningExamples log: DLLogger's JSON stream
(`DLLL {json}` lines, written to --log-file as dllogger's JSONStreamBackend writes them), a per-step
record and a summary record (step []) with train.total_ips, train.loss and val.top1 (%). Run it with
`parser: {kind: dllogger, file: "{output}/dllogger.json"}`."""

import datetime
import json
import time

import tiny


class JSONStream:
    """dllogger's JSONStreamBackend line format (NVIDIA/dllogger), without the package (not on PyPI)."""

    def __init__(self, path):
        self.file = open(path, "w")
        self.t0 = time.time()

    def _write(self, record):
        now = datetime.datetime.now()
        record = dict(timestamp=str(now.timestamp()), datetime=str(now), elapsedtime=str(time.time() - self.t0),
                      **record)
        self.file.write(f"DLLL {json.dumps(record)}\n")
        self.file.flush()

    def metadata(self, metric, metadata):
        self._write(dict(type="METADATA", metric=metric, metadata=metadata))

    def log(self, step, data):
        self._write(dict(type="LOG", step=step, data=data))


def main():
    args = tiny.arguments(__doc__)
    run = tiny.Run(args)
    log = JSONStream(args.log_file) if run.rank == 0 else None
    if log:
        log.metadata("train.total_ips", {"unit": "images/s", "format": ":>.2f"})
        log.metadata("val.top1", {"unit": "%", "format": ":>.2f"})
        log.log("PARAMETER", {"batch_size": args.batch_size, "precision": args.precision, "epochs": args.epochs})
    times, samples = [], 0
    for epoch in range(args.epochs):
        seconds, n, loss = run.epoch()
        if log:
            log.log([epoch], {"train.ips": n / seconds, "train.loss": loss})
        if epoch > 0:  # the first epoch warms up: the summary leaves it out, as DLE's benchmark mode does
            times.append(seconds)
            samples += n
    accuracy = run.accuracy()
    if log:
        ips = samples / sum(times) if times else n / seconds
        log.log([], {"train.total_ips": ips, "train.loss": loss, "val.top1": 100.0 * accuracy})
        print(f"DLL summary: train.total_ips {ips:.1f} images/s, val.top1 {100.0 * accuracy:.2f} %")
    run.close()


if __name__ == "__main__":
    main()
