"""The tiny training (tiny.py) reporting its own measured window through matrix's helper
(`from matrix_bench import measure`, in the benchmark's zipapp that matrix puts on PYTHONPATH): the
warm-up epoch discarded, the device synchronised at both edges of the window, peak memory, GPU
telemetry and the environment capture, as bench reports its own. Run it with `parser: matrix`."""

import tiny
from matrix_bench import measure


def main():
    args = tiny.arguments(__doc__)
    run = tiny.Run(args)
    run.epoch()  # warm-up: discarded
    window = measure.start(run.device)
    samples = 0
    for _ in range(args.epochs - 1):
        _, n, loss = run.epoch()
        samples += n // run.world  # this process's samples: report() sums them over the processes
    measure.stop(window)  # the window ends here: the evaluation below is not part of it
    measure.report(window, items=samples, iterations=(args.epochs - 1) * args.steps, loss=loss,
                   accuracy=run.accuracy())
    run.close()


if __name__ == "__main__":
    main()
