"""The tiny training (tiny.py) printing plain lines, as most scripts do; `parser: pattern` reads its
figures by regular expression: "throughput: 1234.5 samples/s", "epoch time: 12.3 ms/step", "final loss:
0.123", "accuracy: 87.5 %"."""

import json

import tiny


def main():
    args = tiny.arguments(__doc__)
    print(f"received label: {json.dumps(args.label)}")  # the label exactly as the process got it
    run = tiny.Run(args)
    for epoch in range(args.epochs):
        seconds, n, loss = run.epoch()
        if run.rank == 0:
            print(f"epoch {epoch}: throughput: {n / seconds:.2f} samples/s, "
                  f"step time: {1e3 * seconds / args.steps:.3f} ms, loss {loss:.4f}")
    accuracy = run.accuracy()
    if run.rank == 0:
        print(f"final loss: {loss:.4f}")
        print("accuracy: %.2f %%" % (100.0 * accuracy))
    run.close()


if __name__ == "__main__":
    main()
