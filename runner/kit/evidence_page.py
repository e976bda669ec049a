"""The kit's report: `matrix report` of its store (matrix/), and README.md, the evidence page: the device, where
the time went, ResNet-50 at every precision beside the hand-written loop and the published figure, GPT-2 124M at
BF16 beside FP8 (runner/kit/transformer.py), the 2018 recipe beside autocast, and each write-up's table in its own
shape with its published ratios beside today's (published.json). evidence.json holds the same numbers for scripts."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner import analysis as an
from runner.base import safewrite
from runner.kit import goals, gpu_tests, headline, lever_sections, reference, spent, transformer
from runner.kit.cell_results import MIB, CellResult, _md, _num, _ratio, published
from runner.kit.settings import KitView
from runner.report import fmt
from runner.report.fmt import DASH, Table

# --- the page ----------------------------------------------------------------------------------------

def write(kit: KitView, out: Path) -> list[Path]:
    from runner.report import report_command
    from runner.store import Store

    out.mkdir(parents=True, exist_ok=True)
    files = report_command(kit.db, None, ["md", "html", "json", "csv"], out / "matrix")
    with Store(kit.db, readonly=True) as store:
        rows = an.admitted(store.rows())  # a stored ok whose loss went NaN is diverged here too
    by_key: dict[str, list[an.Repeat]] = {}
    for r in rows:
        by_key.setdefault(r.cell_key, []).append(r)
    results = {id(c): CellResult(c, by_key.get(c.key, [])) for c in kit.cells}
    page = Page(kit, results, rows)
    text = page.render()
    safewrite.write_text(out / "README.md", text, mode=0o644)
    safewrite.write_text(out / "evidence.json", json.dumps(_plain(page.doc), indent=1, allow_nan=False) + "\n",
                         mode=0o644)
    return [*files, out / "README.md", out / "evidence.json"]


class Page:
    """The evidence page, section by section; `doc` collects the numbers for evidence.json."""

    def __init__(self, kit: KitView, results: Mapping[int, CellResult], rows: Sequence[an.Repeat]) -> None:
        self.kit, self.results, self.rows = kit, results, rows
        self.pub = published()
        self.doc: dict[str, Any] = {"schema": 1, "kind": "matrix-gpu-evidence", "dry_run": kit.args.dry_run}

    def phase(self, name: str) -> list[CellResult]:
        return [self.results[id(c)] for c in self.kit.cells if c.phase.name == name and not c.phase.reference]

    def render(self) -> str:
        parts = [self.header(), "## GPU tests\n\n" + gpu_tests.words(self.kit.state), self.headline(), self.time_section(), self.resnet50_section(),
                 transformer.section(self.phase("gpt2-124m"), self.doc), self.recipe_section(),
                 self.breakdown_section(), self.ngc_section(), self.vgg_section(), self.mnist_section(),
                 self.wrn_section(), lever_sections.resnet_fastest_section(self.phase("resnet50-fastest"), self.mlperf(), self.doc),
                 lever_sections.gpt2_levers_section(self.phase("gpt2-levers"), self.doc),
                 transformer.by_size_section(self.phase("fp8-by-size"), self.doc), self.left_section()]
        aims, self.doc["goals"] = goals.section(self.doc, self.pub, self.gpu_name())  # from every section's numbers
        parts.insert(2, aims)
        return "\n\n".join(p for p in parts if p).rstrip() + "\n"

    # --- device and time -------------------------------------------------------------------------------
    def env(self) -> dict[str, Any]:
        for r in self.rows:
            if r.ok and r.env:
                return dict(r.env)
        return dict(self.rows[0].env) if self.rows else {}

    def gpu_name(self) -> str:
        env = self.env()
        return str(env.get("device_name") or env.get("cpu") or "unknown device")

    def header(self) -> str:
        env = self.env()
        feats = env.get("device_features") or {}
        title = f"# GPU evidence: {self.gpu_name()}"
        if self.kit.args.dry_run:
            title += " (dry run on a CPU: tiny sizes, the same code path; not a measurement of anything)"
        lines = [title, ""]
        facts = [("device", self.gpu_name()), ("driver", env.get("driver")), ("CUDA", env.get("cuda")),
                 ("cuDNN", env.get("cudnn")), ("PyTorch", env.get("torch")), ("Python", env.get("python")),
                 ("capability", env.get("capability")), ("host", env.get("hostname"))]
        t = Table(["", "value"])
        for k, v in facts:
            t.add(k, str(v) if v not in (None, "") else DASH)
        if feats:
            built = feats.get("built_for") or []
            t.add("this PyTorch has code for", (", ".join(built) if len(built) <= 12 else
                                                f"{built[0]} .. {built[-1]} ({len(built)} entries)")
                  + f" (from {feats.get('built_for_source')})")
            t.add("architecture preflight", {True: f"runs on {feats.get('sm')}" + (" through PTX JIT" if
                                                                                   feats.get("ptx_jit") else ""),
                                             False: "MISMATCH: unsupported", None: "unknown"}[feats.get("runs")])
            cores = feats.get("tensor_cores") or {}
            t.add("tensor cores", ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in cores.items()) or DASH)
        sources = sorted({str((r.metrics.get("telemetry") or {}).get("source") or
                              "none (" + str((r.metrics.get("telemetry") or {}).get("why")) + ")")
                          for r in self.rows if r.ok})
        t.add("telemetry", ", ".join(sources) or DASH)
        lines.append(_md(t))
        lines.append("")
        lines.append("Written by `scripts/gpu_evidence.py` (docs/gpu-evidence.md) from its store; `matrix/` beside this "
                     "page is `matrix report` of the same store (every repeat, with its clocks, power and "
                     "throttle reasons in `matrix/report.json` and the store).")
        self.doc["device"] = {k: v for k, v in facts}
        self.doc["device_features"] = feats
        return "\n".join(lines)

    def time_section(self) -> str:
        unique = {c.key: self.results[id(c)] for c in self.kit.cells if not c.phase.reference}
        return spent.section(list(unique.values()), self.kit.args.window, self.doc)  # a cell in several phases once

    # --- ResNet-50 ---------------------------------------------------------------------------------------
    def reference(self) -> dict[str, Any] | None:
        for c in self.kit.cells:
            if c.phase.reference:
                path = reference.reference_path(self.kit, c)
                if path.exists():
                    data: dict[str, Any] = json.loads(path.read_text())
                    data["params"] = c.params
                    return data
        return None

    def headline(self) -> str:
        return headline.section(self.phase("headline"), self.phase("resnet50"), self.published_amp(), self.mlperf(),
                                self.doc)

    def mlperf(self) -> float | None:
        pub = self.published_amp()
        mlperf = self.pub["resnet50-amp-per-gpu"].get("mlperf_img_s", {}).get(pub[0]) if pub else None
        return float(mlperf) if mlperf else None

    def published_amp(self) -> tuple[str, float] | None:
        name = self.gpu_name().upper()
        for gpu, value in self.pub["resnet50-amp-per-gpu"]["img_s"].items():
            if gpu in name:
                return gpu, float(value)
        return None

    def resnet50_section(self) -> str:
        cells = self.phase("resnet50") + self.phase("recipe-2018")
        if not cells:
            return ""
        ref = self.reference()
        ref_stats = an.describe([m["throughput"] for m in ref["runs"]["reference"]]) if ref else None
        bench_side = an.describe([m["throughput"] for m in ref["runs"]["bench"]]) if ref else None
        pub = self.published_amp()
        batch = cells[0].cell.params["batch_size"]
        t = Table(["precision", "amp impl", "channels_last", "img/s (mean ± std)", "CV", "peak memory (MiB)",
                   "img/J", "÷ hand-written loop", "÷ published", "throttled", "SM clock median (MHz)",
                   "power mean (W)"], align=["l", "l", "l"] + ["r"] * 9)
        rows = []
        for res in cells:
            p = res.cell.params
            tp = res.stats("throughput")
            same_as_ref = ref is not None and all(p.get(k) == ref["params"].get(k) for k in ref["params"])
            vs_ref = _ratio(tp.mean, ref_stats.mean) if same_as_ref and ref_stats else DASH
            vs_pub = (_ratio(tp.mean, pub[1]) if pub and p["precision"] in ("amp", "amp-bf16") else DASH)
            sm = self.median(res.telemetry(("sm_clock_mhz", "median")))
            power = self.median(res.telemetry(("power_w", "mean")))
            t.add(p["precision"], str(p.get("amp_impl") or "auto"), "on" if p.get("channels_last") else "off",
                  res.text("throughput"), fmt.percent(tp.cv) if tp.n >= 2 else DASH,
                  res.text("peak_mem", 1 / MIB), res.text("images_per_joule"), vs_ref, vs_pub,
                  f"{res.throttled} of {len(res.ok)}" if res.ok else DASH, _num(sm, 0), _num(power, 0))
            rows.append({"params": p, "n": tp.n, "mean": tp.mean, "std": tp.std, "cv": tp.cv,
                         "peak_mem_mib": res.mean("peak_mem", 1 / MIB), "images_per_joule": res.mean("images_per_joule"),
                         "throttled": res.throttled, "statuses": res.statuses})
        self.doc["resnet50"] = rows
        lines = [f"## ResNet-50, batch {batch}, synthetic ImageNet-size data", "",
                 "Every precision with channels_last off and on, cudnn.benchmark on; the 2018 recipe (`--amp-impl "
                 "manual`: FP16 model, FP32 master weights, static loss scale 256) in the rows marked manual. CV is "
                 "the coefficient of variation across repeats. Each repeat is a fresh process whose window was "
                 f"sized to at least {self.kit.args.window:g} s.", "", _md(t)]
        if ref and ref_stats and bench_side:
            p = ref["params"]
            ratio = bench_side.mean / ref_stats.mean if ref_stats.mean else math.nan
            self.doc["reference"] = {"bench": bench_side.mean, "bench_std": bench_side.std, "loop": ref_stats.mean,
                                     "loop_std": ref_stats.std, "ratio": ratio, "n": ref_stats.n}
            lines += ["", f"**The hand-written loop** (`benchmarks/reference_loop.py`: autocast + GradScaler, same "
                      f"model, batch, data and {p['precision']}, channels_last, cudnn.benchmark, SGD "
                      f"{ref.get('optimizer') or 'default'} as bench's), alternating with "
                      f"bench in fresh processes in the same run: bench {fmt.mean_std(bench_side.mean, bench_side.std, bench_side.n)}"
                      f" img/s, the loop {fmt.mean_std(ref_stats.mean, ref_stats.std, ref_stats.n)} img/s: "
                      f"bench ÷ loop = {ratio:.3f}."]
        if pub:
            src = self.pub["resnet50-amp-per-gpu"]
            lines += ["", f"Published figure for mixed-precision ResNet-50 training on an {pub[0]}: {pub[1]:,.0f} img/s "
                      f"per GPU ({src['source']})."]
        return "\n".join(lines)

    @staticmethod
    def median(values: Sequence[float]) -> float:
        v = sorted(values)
        return (v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2) if v else math.nan

    def find(self, results: Sequence[CellResult], **params: Any) -> CellResult | None:
        for res in results:
            if all(res.cell.params.get(k) == v for k, v in params.items()):
                return res
        return None

    def recipe_section(self) -> str:
        manual = self.phase("recipe-2018")
        main = self.phase("resnet50")
        if not manual or not main:
            return ""
        t = Table(["channels_last", "2018 recipe (img/s)", "autocast fp16 (img/s)", "recipe ÷ autocast",
                   "pure fp16 (img/s)"], align=["l", "r", "r", "r", "r"])
        for res in manual:
            cl = res.cell.params.get("channels_last")
            auto = self.find(main, precision=res.cell.params["precision"] if self.kit.args.dry_run else "amp",
                             channels_last=cl)
            fp16 = self.find(main, precision="fp16", channels_last=cl)
            t.add("on" if cl else "off", res.text("throughput"), auto.text("throughput") if auto else DASH,
                  _ratio(res.mean("throughput"), auto.mean("throughput")) if auto else DASH,
                  fp16.text("throughput") if fp16 else DASH)
        return "\n".join(["## The 2018 recipe beside native autocast", "",
                          "What a 2018 NGC image's `--fp16` meant (apex's ImageNet example: an FP16 model with FP32 "
                          "master weights and a static loss scale of 256), run by today's PyTorch on this GPU, "
                          "beside `torch.autocast` with a GradScaler and beside a pure FP16 model.", "", _md(t)])

    # --- the write-ups -------------------------------------------------------------------------------------
    def breakdown_section(self) -> str:
        cells = self.phase("resnet50-breakdown")
        if not cells:
            return ""
        pub = self.pub["resnet50-throughput"]
        t = Table(["", "GPUs", "batch per GPU", "fwd_throughput", "bwd_throughput", "overall throughput",
                   "fwd ÷ overall", "bwd ÷ overall"], align=["l"] + ["r"] * 7)
        for row in pub["one_node"]:
            t.add("published (K80)", str(row["gpus"]), "32", _num(row["fwd"]), _num(row["bwd"]), _num(row["overall"]),
                  _ratio(row["fwd"], row["overall"]), _ratio(row["bwd"], row["overall"]))
        today = []
        for res in cells:
            f, b, o = res.mean("fwd_throughput"), res.mean("bwd_throughput"), res.mean("throughput")
            t.add(f"today ({res.cell.params['precision']})", "1", str(res.cell.params["batch_size"]),
                  res.text("fwd_throughput"), res.text("bwd_throughput"), res.text("throughput"), _ratio(f, o),
                  _ratio(b, o))
            today.append({"batch_size": res.cell.params["batch_size"], "fwd": f, "bwd": b, "overall": o})
        self.doc["resnet50-throughput"] = today
        first = pub["one_node"][0]
        sentence = (f"Published on one K80: forward ran at {first['fwd'] / first['overall']:.2f}x and backward at "
                    f"{first['bwd'] / first['overall']:.2f}x the overall rate.")
        valid = [r for r in today if r["overall"] == r["overall"] and r["fwd"] == r["fwd"]]
        if valid:
            sentence += (" Today, on one GPU, forward runs at " + ", ".join(
                f"{r['fwd'] / r['overall']:.2f}x (batch {r['batch_size']})" for r in valid) + " the overall rate.")
        return "\n".join(["## Write-up: ResNet-50 throughput with forward and backward (pytorch_throughput)", "",
                          pub["source"] + ". Today's rows: bench `--breakdown` (the device synchronised after each "
                          "phase), one GPU: the multi-GPU and multi-node rows need more GPUs than this machine has.",
                          "", _md(t), "", sentence])

    def ngc_section(self) -> str:
        cells = self.phase("resnet-ngc-2018")
        if not cells:
            return ""
        pub = self.pub["ngc-vs-slurm"]
        t = Table(["Speed (img/s)", "Slurm", "16/32", "Container", "16/32", "today", "today 16/32",
                   "today ÷ container"], align=["l"] + ["r"] * 7)
        out = []
        models = list(dict.fromkeys(r.cell.params["model"] for r in cells))
        for model in models:
            fp32 = self.find(cells, model=model, precision="fp32")
            manual = self.find(cells, model=model, amp_impl="manual")
            auto = next((r for r in cells if r.cell.params["model"] == model and r.cell.params["precision"] != "fp32"
                         and r.cell.params.get("amp_impl") != "manual"), None)
            name = {"resnet18": "Resnet18", "resnet50": "Resnet50"}.get(model, model)
            s = pub["img_s"]["slurm"].get(model, {})
            c = pub["img_s"]["container"].get(model, {})
            base = fp32.mean("throughput") if fp32 else math.nan
            for label, res, key in ((f"{name}-32", fp32, "fp32"), (f"{name}-16", manual, "fp16"),
                                    (f"{name}-amp (today only)", auto, None)):
                today = res.mean("throughput") if res else math.nan
                t.add(label, _num(s.get(key)) if key else DASH,
                      _ratio(s.get("fp16"), s.get("fp32")) if key == "fp16" else DASH,
                      _num(c.get(key)) if key else DASH,
                      _ratio(c.get("fp16"), c.get("fp32")) if key == "fp16" else DASH,
                      res.text("throughput") if res else DASH,
                      _ratio(today, base) if key != "fp32" else DASH,
                      _ratio(today, c.get(key)) if key else DASH)
                out.append({"model": model, "row": label, "today": today})
        self.doc["ngc-vs-slurm"] = out
        return "\n".join(["## Write-up: NGC 18.07 container vs bare-metal Slurm (ResNet-18/50, batch 128)", "",
                          pub["source"] + ". Today: synthetic data on this GPU, `-16` is the same recipe "
                          "(`--precision amp --amp-impl manual --loss-scale 256`), `-amp` is autocast.", "", _md(t)])

    def vgg_section(self) -> str:
        cells = self.phase("vgg16-cifar")
        if not cells:
            return ""
        pub = self.pub["apex-vgg16-cifar"]
        batches = sorted({int(r.cell.params["batch_size"]) for r in cells})
        precisions = list(dict.fromkeys(r.cell.params["precision"] for r in cells))
        t = Table(["GPU - Method", "Metric", *(f"batch {b}" for b in batches)], align=["l", "l"] + ["r"] * len(batches))
        for precision in precisions:
            for metric, key, scale in (("Time (sec / 100 it)", "iter_time", 100.0), ("Memory (MiB)", "peak_mem", 1 / MIB)):
                row = []
                for b in batches:
                    res = self.find(cells, precision=precision, batch_size=b)
                    row.append(res.text(key, scale) if res else DASH)
                t.add(f"today - {precision.upper()}", metric, *row)
        pub_batches = pub["batches"]
        r = Table(["ratio of time", "GPU", *(f"batch {b}" for b in batches)], align=["l", "l"] + ["r"] * len(batches))
        doc = []
        for low in [p for p in precisions if p != "fp32"]:
            pub_key = {"amp-bf16": "amp", "bf16": "fp16"}.get(low, low)
            for gpu, times in pub["time_s_per_100_iterations"].items():
                r.add(f"{pub_key.upper()}/FP32", gpu, *(
                    _ratio(times[pub_key][pub_batches.index(b)], times["fp32"][pub_batches.index(b)])
                    if b in pub_batches else DASH for b in batches))
            vals = []
            for b in batches:
                lo, base = self.find(cells, precision=low, batch_size=b), self.find(cells, precision="fp32", batch_size=b)
                v = (lo.mean("iter_time") / base.mean("iter_time")) if lo and base else math.nan
                vals.append(v)
                doc.append({"precision": low, "batch_size": b, "time_ratio_to_fp32": v})
            r.add(f"{low.upper()}/FP32", "today", *(fmt.ratio(v) for v in vals))
        self.doc["apex-vgg16-cifar"] = doc
        v100 = pub["time_s_per_100_iterations"]["V100"]
        amp_pub = [a / f for a, f in zip(v100["amp"], v100["fp32"], strict=True)]
        today_amp = [d["time_ratio_to_fp32"] for d in doc if d["precision"] in ("amp", "amp-bf16")
                     and d["time_ratio_to_fp32"] == d["time_ratio_to_fp32"]]
        sentence = (f"Published on a V100, AMP took {min(amp_pub):.2f}x to {max(amp_pub):.2f}x the time of FP32 "
                    "(apex 2018: slower at small batches, a little faster at the largest).")
        if today_amp:
            sentence += f" Today it takes {min(today_amp):.2f}x to {max(today_amp):.2f}x."
        return "\n".join(["## Write-up: apex on CIFAR-10, VGG16 (FP32 / FP16 / AMP x batch 128-2048)", "",
                          pub["source"] + ". Today: the same network on synthetic CIFAR-size data (accuracy is not "
                          "comparable and is left out), time per 100 iterations and the allocator's peak memory.", "",
                          _md(t), "", "Time of each precision over FP32's at the same batch (below 1: faster):", "",
                          _md(r), "", sentence])

    def mnist_section(self) -> str:
        cells = self.phase("mnist-tensor-cores")
        if not cells:
            return ""
        pub = self.pub["tensor-cores-t4"]["mnist"]
        fp32 = cells[0]
        base_tp, base_mem = fp32.mean("throughput"), fp32.mean("peak_mem")
        t = Table(["run", "published time (s)", "published ÷ fp32", "published memory (MiB)", "÷ fp32",
                   "today img/s", "today time ÷ fp32", "today peak memory (MiB)", "÷ fp32"], align=["l"] + ["r"] * 8)
        keys = ["fp32_512", "amp_512", "amp_1024"]
        doc = []
        for key, res in zip(keys, cells, strict=False):
            p = pub[key]
            tp, mem = res.mean("throughput"), res.mean("peak_mem")
            t.add(f"{res.cell.params['precision']} batch {res.cell.params['batch_size']}", _num(p["time_s"], 3),
                  _ratio(p["time_s"], pub["fp32_512"]["time_s"]), _num(p["memory_bytes"] / MIB, 0),
                  _ratio(p["memory_bytes"], pub["fp32_512"]["memory_bytes"]), res.text("throughput"),
                  _ratio(base_tp, tp), res.text("peak_mem", 1 / MIB), _ratio(mem, base_mem))
            doc.append({"run": key, "throughput": tp, "time_ratio": base_tp / tp if tp else None,
                        "memory_ratio": mem / base_mem if base_mem else None})
        self.doc["tensor-cores-t4"] = doc
        return "\n".join(["## Write-up: Tensor Cores with PyTorch (mnist CNN, fp32 vs amp)", "",
                          self.pub["tensor-cores-t4"]["source"] + ". Today: the same kind of network on synthetic "
                          "MNIST-size data (no loader), so the published times include a data loader ours do not; "
                          "compare the ratios.", "", _md(t)])

    def wrn_section(self) -> str:
        cells = self.phase("wrn-apex-levels")
        if not cells:
            return ""
        pub = self.pub["wrn-apex-t4-p100"]
        workers = sorted({int(r.cell.params.get("workers", 0)) for r in cells})
        levels = list(dict.fromkeys(r.cell.label.get("opt_level", "") for r in cells))
        t = Table(["Level", "T4 time", "T4 ÷ O0", "T4 memory (MB)", "P100 ÷ O0",
                   *(f"today img/s, {w} workers" for w in workers), "today ÷ O0", "today peak memory (MiB)",
                   f"data wait, {workers[0]} workers"], align=["l"] + ["r"] * (7 + len(workers)))
        best = workers[-1]
        o0 = next((r for r in cells if r.cell.label.get("opt_level") == "O0" and r.cell.params.get("workers") == best),
                  None)
        doc = []
        for level in levels:
            row = [r for r in cells if r.cell.label.get("opt_level") == level]
            at = {int(r.cell.params.get("workers", 0)): r for r in row}
            t4, p100 = pub["time_s"]["T4"], pub["time_s"]["P100"]
            top = at.get(best)
            t.add(level, _clock(t4.get(level)), _ratio(t4.get(level), t4["O0"]), _num(pub["memory_mb"]["T4"].get(level), 0),
                  _ratio(p100.get(level), p100["O0"]) if level in p100 else DASH,
                  *(at[w].text("throughput") if w in at else DASH for w in workers),
                  _ratio(o0.mean("throughput"), top.mean("throughput")) if top and o0 else DASH,
                  top.text("peak_mem", 1 / MIB) if top else DASH,
                  at[workers[0]].text("data_wait", 100.0) + " %" if workers[0] in at and at[workers[0]].ok else DASH)
            doc.append({"level": level, **{f"workers_{w}": at[w].mean("throughput") for w in workers if w in at}})
        self.doc["wrn-apex-t4-p100"] = doc
        return "\n".join(["## Write-up: Wide-ResNet with apex O0-O3 on T4 and P100 (and the data loader)", "",
                          pub["source"] + ". Today: WRN-28-10, batch 128, on a generated folder of CIFAR-size JPEG "
                          "images read by a DataLoader with 0, 2, 4 and 8 workers; O0 is fp32, O1 autocast, O2 an FP16 "
                          "model with FP32 master weights (a static loss scale, where apex's O2 scales dynamically), "
                          "O3 pure FP16. `÷ O0` is time over O0's (today: at the most workers). The data wait is the "
                          "share of the window spent waiting for the loader.", "", _md(t)])

    def left_section(self) -> str:
        missing = self.kit.missing()
        if not missing:
            return "## Not measured\n\nNothing: every repeat of the plan is stored."
        per: dict[str, int] = {}
        for c, _ in missing:
            per[c.phase.name] = per.get(c.phase.name, 0) + 1
        self.doc["left"] = per
        return "\n".join(["## Not measured yet", "",
                          ", ".join(f"{k}: {v} repeats" for k, v in per.items())
                          + f" (about {self.kit.estimate_left():.0f} s). The same command resumes from the store."])


def _plain(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null, anything else unknown its text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def _clock(seconds: Any) -> str:
    if seconds is None:
        return "N/A"
    s = int(seconds)
    return f"{s // 3600}h {s % 3600 // 60}min {s % 60}s" if s >= 3600 else f"{s // 60}min {s % 60:02d}s"
