"""The quickstart's noise before and after: the old measurement settings against the new, side by side on one
machine, their repeats alternating, and the CV of each cell's throughput across its repeats.

    .venv/bin/python benchmarks/noise_check.py --rounds 5 --out results/noise-check

"old": what the quickstart did before (2 OpenMP threads spinning while they wait, a fixed 5 warm-up and 20
measured iterations); "new": what it does now (threads that sleep while they wait, a warm-up until steady and a
window calibrated to at least 1 s). Both measure the same cells (the quickstart's models; `--cells` picks some).
Round r runs repeat r of every cell of "old", then of "new" (each a `matrix run` into its own store), so a change
in the machine's load falls on both. Prints one Markdown table: per cell, each side's mean ± std, CV and n, and the
machine (CPU, its bf16 flags, load averages seen by the repeats).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner import analysis as an  # noqa: E402
from runner.store import Store  # noqa: E402

CELLS = {
    "mnist-fp32": "{model: mnist_cnn, precision: fp32}",
    "mnist-bf16": "{model: mnist_cnn, precision: bf16}",
    "wrn-fp32": "{model: wrn, precision: fp32}",
    "wrn-bf16": "{model: wrn, precision: bf16}",
}
SETTINGS = {
    "old": ('{OMP_NUM_THREADS: "2"}', "{iterations: 20, warmup: 5, repeats: %d, timeout: 900, seed: 0}"),
    "new": ("{OMP_WAIT_POLICY: PASSIVE}",
            "{warmup: {max: 30, max_time: 2s, window: 3}, iterations: {min_time: 1s, min: 2, max: 500}, "
            "repeats: %d, timeout: 900, seed: 0}"),
}


def matrix_text(side: str, cells: list[str], repeats: int) -> str:
    env, run = SETTINGS[side]
    drop = ", ".join(v for k, v in CELLS.items() if k not in cells)
    return f"""name: noise-{side}
environments:
  - {{name: {side}, backend: local, env: {env}}}
axes:
  model: [mnist_cnn, wrn]
  precision: [fp32, bf16]
  batch_size: [32, 64]
  dataset: [synthetic]
  device: [cpu]
include:
  - {{model: wrn, wrn_depth: 10, wrn_width: 1}}
exclude: [{drop}]
run: {run % repeats}
"""


def cpu_words() -> str:
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    have = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{model or 'unknown CPU'} ({', '.join(have) or 'no AVX2'}; {len(__import__('os').sched_getaffinity(0))} CPUs)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "noise-check")
    p.add_argument("--cells", default="mnist-fp32,mnist-bf16,wrn-fp32", help=f"of {', '.join(CELLS)}")
    args = p.parse_args()
    cells = [c.strip() for c in args.cells.split(",") if c.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    matrix = [str(ROOT / ".venv" / "bin" / "matrix")]
    loads: list[float] = []
    started = time.time()
    for r in range(1, args.rounds + 1):
        for side in SETTINGS:
            path = args.out / f"{side}.yaml"
            path.write_text(matrix_text(side, cells, r))
            loads.append(__import__("os").getloadavg()[0])
            subprocess.run([*matrix, "run", "-m", str(path), "--db", str(args.out / f"{side}.db")],
                           check=False, stdout=subprocess.DEVNULL)
            print(f"round {r}/{args.rounds} {side} done at {time.time() - started:.0f} s, load {loads[-1]:.1f}",
                  file=sys.stderr)
    summaries = {}
    for side in SETTINGS:
        with Store(args.out / f"{side}.db", readonly=True) as store:
            summaries[side] = an.summarize(an.frame(list(store.rows())))
    keys = ["model", "precision", "batch_size"]
    old, new = (summaries[s].set_index(keys) for s in SETTINGS)
    print(f"Machine: {cpu_words()}; load average (1 min) between {min(loads):.1f} and {max(loads):.1f} during the "
          f"runs; {args.rounds} rounds, {time.strftime('%d %b %Y %H:%M UTC', time.gmtime(started))}, "
          f"{(time.time() - started) / 60:.0f} min.\n")
    print("| model | precision | batch | old img/s | old CV | new img/s | new CV |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for idx in old.index:
        o, n = old.loc[idx], new.loc[idx] if idx in new.index else None
        row = {"cell": list(idx), "old": [o["throughput_mean"], o["throughput_std"], o["throughput_cv"],
                                          int(o["throughput_n"])]}
        text_new = "| — | — |"
        if n is not None:
            row["new"] = [n["throughput_mean"], n["throughput_std"], n["throughput_cv"], int(n["throughput_n"])]
            text_new = f"| {n['throughput_mean']:.1f} ± {n['throughput_std']:.1f} | {n['throughput_cv']:.1%} |"
        rows.append(row)
        print(f"| {idx[0]} | {idx[1]} | {idx[2]} | {o['throughput_mean']:.1f} ± {o['throughput_std']:.1f} "
              f"| {o['throughput_cv']:.1%} {text_new}")
    (args.out / "noise.json").write_text(json.dumps({"cpu": cpu_words(), "loads": loads, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
