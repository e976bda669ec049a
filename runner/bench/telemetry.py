"""What the device did during the measured window: clocks, power, temperature, clock-event reasons, energy.

`start(device)` is called by timing.start_window just before the window opens and returns `stop()`, which
timing.end_window calls just after it closes; stop() returns a dict that becomes `metrics.telemetry`.
On a GPU a background thread samples the device at a bounded rate (SAMPLE_INTERVAL_S) through NVML
(the `pynvml` module of nvidia-ml-py) where it imports, else through one long-running
`nvidia-smi --query-gpu ... -lms N` process; with neither, the result says so (`source: null`).
The thread only waits between samples (in Event.wait, an NVML call or a pipe read, all of which
release the GIL), so the training loop never waits for it. Energy comes from NVML's total-energy
counter read at both edges of the window where the GPU has one, else from the sampled power.

A repeat is `throttled` when its SM clock fell below CLOCK_DROP of the highest SM clock it reached
(samples where the GPU was idle left out), or when a power, thermal or hardware slowdown reason was
seen (docs/internals.md, "GPU telemetry").
"""

import os
import shutil
import subprocess
import threading
import time

from .compat import optional_module

SAMPLE_INTERVAL_S = 0.2   # 5 samples a second; never faster than MIN_INTERVAL_S
MIN_INTERVAL_S = 0.05
MAX_SAMPLES = 4000        # past this, every other sample is dropped and the interval doubles
CLOCK_DROP = 0.90         # an SM clock under 90% of the window's own maximum is a throttled repeat

# NVML clock-event reasons (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
REASONS = ((0x1, "GpuIdle"), (0x2, "ApplicationsClocksSetting"), (0x4, "SwPowerCap"),
           (0x8, "HwSlowdown"), (0x10, "SyncBoost"), (0x20, "SwThermalSlowdown"),
           (0x40, "HwThermalSlowdown"), (0x80, "HwPowerBrakeSlowdown"), (0x100, "DisplayClockSetting"))
GPU_IDLE = 0x1
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # power, thermal and hardware slowdowns
SMI_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")
SMI_REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # new name, old name


def reason_names(mask):
    """The names of the reason bits set in `mask`, in bit order (unknown bits as hex)."""
    if mask is None:
        return []
    names = [name for bit, name in REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in REASONS)
    if rest:
        names.append("0x%x" % rest)
    return names


def classify(sm_clocks, reasons, drop=CLOCK_DROP):
    """(throttled, why) from the SM clocks of the samples where the GPU was busy and the OR of every
    sample's reason bits; throttled is None when nothing was sampled to judge by."""
    why = []
    if reasons is not None and reasons & THROTTLING:
        why.append("clock-event reasons %s" % ", ".join(reason_names(reasons & THROTTLING)))
    clocks = [c for c in sm_clocks if c is not None]
    if clocks:
        top, low = max(clocks), min(clocks)
        if top > 0 and low < drop * top:
            why.append("SM clock fell to %d MHz, under %d%% of its %d MHz maximum in the window"
                       % (low, round(drop * 100), top))
    if why:
        return True, "; ".join(why)
    if not clocks and reasons is None:
        return None, "nothing sampled"
    return False, ""


def _median(values):
    v = sorted(values)
    n = len(v)
    if not n:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def energy_from_power(samples, t_start, t_stop):
    """Joules over [t_start, t_stop] from (time, watts) samples: the trapezoid between samples, each edge
    held at its nearest sample's power. None without a power sample."""
    pts = [(t, w) for t, w in samples if w is not None]
    if not pts or t_stop <= t_start:
        return None
    pts.sort()
    total = (max(pts[0][0], t_start) - t_start) * pts[0][1]
    for (ta, wa), (tb, wb) in zip(pts, pts[1:]):
        a, b = max(ta, t_start), min(tb, t_stop)
        if b > a:
            total += (b - a) * (wa + wb) / 2.0
    total += (t_stop - min(pts[-1][0], t_stop)) * pts[-1][1]
    return total


def summarize(samples, t_start, t_stop, source, power_limit_w=None, counter_j=None, error=None):
    """The telemetry record of one window from its samples: dicts with t, sm, mem, power, temp, reasons
    (any may be None). `counter_j`: energy from the GPU's counter over the window, if it has one."""
    busy = [s for s in samples if not ((s.get("reasons") or 0) & GPU_IDLE)]
    sm = [s["sm"] for s in busy if s.get("sm") is not None]
    mem = [s["mem"] for s in samples if s.get("mem") is not None]
    power = [s["power"] for s in samples if s.get("power") is not None]
    temp = [s["temp"] for s in samples if s.get("temp") is not None]
    masks = [s["reasons"] for s in samples if s.get("reasons") is not None]
    mask = None
    if masks:
        mask = 0
        for m in masks:
            mask |= m
    throttled, why = classify(sm, mask)
    energy, energy_source = counter_j, "counter" if counter_j is not None else None
    if energy is None:
        energy = energy_from_power([(s["t"], s.get("power")) for s in samples], t_start, t_stop)
        energy_source = "power samples" if energy is not None else None
    return {
        "source": source, "samples": len(samples), "seconds": t_stop - t_start,
        "sm_clock_mhz": {"min": min(sm), "median": _median(sm), "max": max(sm)} if sm else None,
        "mem_clock_mhz": {"min": min(mem), "median": _median(mem)} if mem else None,
        "power_w": {"mean": sum(power) / len(power), "max": max(power)} if power else None,
        "power_limit_w": power_limit_w,
        "temperature_c": {"max": max(temp)} if temp else None,
        "clock_event_mask": mask, "clock_events": reason_names(mask),
        "throttle_samples": sum(1 for m in masks if m & THROTTLING),
        "throttled": throttled, "throttle_reason": why or None,
        "energy_j": energy, "energy_source": energy_source,
        "error": error,
    }


def nothing(why, source=None):
    """The record of a window that was not sampled, and why."""
    rec = summarize([], 0.0, 0.0, source)
    rec["why"] = why
    return rec


# --- NVML ----------------------------------------------------------------------------------------

def _call(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


class _Nvml(object):
    """One GPU through pynvml: each reading None where this GPU or driver does not answer it."""

    def __init__(self, pynvml, index):
        from .envinfo import _nvml_handle
        self.nv = pynvml
        pynvml.nvmlInit()
        try:
            self.handle = _nvml_handle(pynvml, index)
        except Exception:
            pynvml.nvmlShutdown()
            raise
        self.sm_id = getattr(pynvml, "NVML_CLOCK_SM", 1)
        self.mem_id = getattr(pynvml, "NVML_CLOCK_MEM", 2)
        self.temp_id = getattr(pynvml, "NVML_TEMPERATURE_GPU", 0)
        self.reasons_fn = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                           or getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        self.energy_fn = getattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", None)

    def sample(self):
        nv, h = self.nv, self.handle
        power = _call(nv.nvmlDeviceGetPowerUsage, h)
        reasons = _call(self.reasons_fn, h) if self.reasons_fn is not None else None
        return {"t": time.perf_counter(),
                "sm": _call(nv.nvmlDeviceGetClockInfo, h, self.sm_id),
                "mem": _call(nv.nvmlDeviceGetClockInfo, h, self.mem_id),
                "power": power / 1000.0 if power is not None else None,
                "temp": _call(nv.nvmlDeviceGetTemperature, h, self.temp_id),
                "reasons": int(reasons) if reasons is not None else None}

    def power_limit_w(self):
        for name in ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"):
            fn = getattr(self.nv, name, None)
            value = _call(fn, self.handle) if fn is not None else None
            if value is not None:
                return value / 1000.0
        return None

    def energy_mj(self):
        return _call(self.energy_fn, self.handle) if self.energy_fn is not None else None

    def close(self):
        _call(self.nv.nvmlShutdown)


# --- nvidia-smi ----------------------------------------------------------------------------------

def _smi_number(text):
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else float(text)
    except ValueError:
        return None  # [N/A], [Not Supported], ...


def parse_smi_line(line):
    """One line of `nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,<reasons>
    --format=csv,noheader,nounits` as a sample, or None when it is not one (an error message)."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != len(SMI_FIELDS) + 1:
        return None
    sm, mem, power, temp, reasons = [_smi_number(f) for f in fields]
    if sm is None and power is None and reasons is None:
        return None
    return {"t": time.perf_counter(), "sm": sm, "mem": mem, "power": power, "temp": temp,
            "reasons": int(reasons) if reasons is not None else None}


class _Smi(object):
    """One long-running nvidia-smi that prints a line every interval (one process, not one per sample)."""

    def __init__(self, exe, selector, interval):
        self.exe, self.selector, self.interval = exe, selector, interval
        self.proc = None
        self.closed = False
        self.error = None

    def lines(self, stop):
        """Samples as nvidia-smi prints them, until stop is set; falls back to the older reason field."""
        for field in SMI_REASON_FIELDS:
            if stop.is_set() or self.closed:
                return
            query = ",".join(SMI_FIELDS + (field,))
            # Not tethered (tether.py): a preexec_fn makes Popen fork the whole rank, model and all, where it
            # would otherwise vfork. nvidia-smi writes a line every interval into this pipe, and its first write
            # after this process died ends it (SIGPIPE, which Popen restores to its default).
            try:
                self.proc = subprocess.Popen(
                    [self.exe, "--query-gpu=" + query, "--format=csv,noheader,nounits", "-i", self.selector,
                     "-lms", str(int(self.interval * 1000))],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    universal_newlines=True)
            except OSError as e:
                self.error = "nvidia-smi: %s" % e
                return
            proc, got = self.proc, False
            try:
                for line in proc.stdout:
                    sample = parse_smi_line(line)
                    if sample is None:
                        if not got:
                            self.error = "nvidia-smi: %s" % line.strip()[:200]
                            break
                        continue
                    got = True
                    yield sample
            finally:
                _terminate(proc)
                proc.stdout.close()
            if got:
                return

    def close(self):
        """Called from the measuring thread: ends the process; the sampling thread sees the pipe end."""
        self.closed = True
        if self.proc is not None:
            _terminate(self.proc)


def _terminate(proc):
    try:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=5)
    except Exception:
        pass


# --- the sampler ---------------------------------------------------------------------------------

class Sampler(object):
    """Samples one GPU on a daemon thread between start() and stop()."""

    def __init__(self, reader, source, interval=SAMPLE_INTERVAL_S):
        self.reader, self.source = reader, source
        self.interval = max(float(interval), MIN_INTERVAL_S)
        self.samples = []
        self.stop_event = threading.Event()
        self.error = None
        self.thread = None
        self.t_start = self.t_stop = None
        self.energy_start = None

    def start(self):
        nvml = self.source == "nvml"
        self.t_start = time.perf_counter()
        if nvml:
            self.energy_start = self.reader.energy_mj()
            self.samples.append(self.reader.sample())  # the window's first edge, before it opens
        self.thread = threading.Thread(target=self._run, name="matrix-telemetry")
        self.thread.daemon = True
        self.thread.start()
        return self.stop

    def _keep(self, sample):
        self.samples.append(sample)
        if len(self.samples) >= MAX_SAMPLES:  # bounded memory: halve the samples, halve the rate
            self.samples = self.samples[::2]
            self.interval *= 2

    def _run(self):
        try:
            if self.source == "nvml":
                while not self.stop_event.wait(self.interval):
                    self._keep(self.reader.sample())
            else:
                for sample in self.reader.lines(self.stop_event):
                    if self.stop_event.is_set():
                        break
                    self._keep(sample)
                if self.reader.error and not self.samples:
                    self.error = self.reader.error
        except Exception as e:  # a sampler that breaks must not break the benchmark
            self.error = "%s: %s" % (type(e).__name__, e)

    def stop(self):
        """End sampling and return the window's record; a sampler that breaks says so, never raises."""
        try:
            return self._stop()
        except Exception as e:
            self.stop_event.set()
            rec = nothing("the sampler failed: %s: %s" % (type(e).__name__, e), self.source)
            return rec

    def _stop(self):
        self.t_stop = time.perf_counter()
        self.stop_event.set()
        counter = None
        limit = None
        if self.source == "nvml":
            end = self.reader.energy_mj()
            if end is not None and self.energy_start is not None and end >= self.energy_start:
                counter = (end - self.energy_start) / 1000.0
            limit = self.reader.power_limit_w()
        else:
            self.reader.close()
        self.thread.join(5.0)
        if self.source == "nvml":
            self.samples.append(self.reader.sample())  # the window's last edge, after it closed
            self.reader.close()
        rec = summarize(list(self.samples), self.t_start, self.t_stop, self.source, limit, counter, self.error)
        rec["interval_s"] = self.interval
        if self.source != "nvml":
            rec["power_limit_w"] = _smi_power_limit(self.reader.exe, self.reader.selector)
        return rec


def _smi_power_limit(exe, selector):
    from .compat import run_quiet
    out = run_quiet([exe, "--query-gpu=power.limit", "--format=csv,noheader,nounits", "-i", selector])
    return _smi_number(out.splitlines()[0]) if out else None


def open_reader(index, interval=SAMPLE_INTERVAL_S):
    """(reader, source, why): NVML where pynvml imports and answers, else nvidia-smi on PATH, else none."""
    why = []
    pynvml = optional_module("pynvml")
    if pynvml is not None:
        try:
            return _Nvml(pynvml, index), "nvml", None
        except Exception as e:
            why.append("pynvml: %s" % (str(e).splitlines()[0] if str(e) else type(e).__name__))
    else:
        why.append("pynvml is not importable")
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        from .envinfo import _gpu_selector
        kind, key = _gpu_selector(index)
        return _Smi(exe, str(key), interval), "nvidia-smi", None
    why.append("nvidia-smi is not on PATH")
    return None, None, "; ".join(why)


def start(device, interval=None):
    """Begin sampling `device`; returns stop(), which ends sampling and returns the window's record."""
    if device is None or device.type != "cuda":
        record = nothing("%s device: no GPU to sample" % (device.type if device is not None else "no"))
        return lambda: record
    from .compat import torch
    index = device.index if device.index is not None else torch.cuda.current_device()
    if interval is None:
        interval = float(os.environ.get("MATRIX_TELEMETRY_INTERVAL", SAMPLE_INTERVAL_S))
    reader, source, why = open_reader(index, interval)
    if reader is None:
        record = nothing(why)
        return lambda: record
    return Sampler(reader, source, interval).start()


def combine_ranks(record, images, world, dist, device):
    """Every rank samples its own GPU; the result keeps rank 0's record, with the energy summed over the
    ranks (unknown when any rank has none), images per joule the global images over it, and throttled
    when any rank was. Every rank must call this (collectives). Returns metrics to add."""
    energy = record.get("energy_j")
    throttled = record.get("throttled")
    if world > 1:
        from .distributed import all_reduce_values
        total, known, n_throttled, n_judged = all_reduce_values(
            dist, [energy or 0.0, 1.0 if energy is not None else 0.0, 1.0 if throttled else 0.0,
                   1.0 if throttled is not None else 0.0], "SUM", device)
        energy = total if int(known) == world else None
        throttled = True if n_throttled > 0 else (False if int(n_judged) == world else None)
        record = dict(record, ranks={"world": world, "ranks_with_energy": int(known),
                                     "ranks_throttled": int(n_throttled), "energy_j_total": energy})
        record["throttled"] = throttled
    out = {"telemetry": record, "energy_j": energy,
           "images_per_joule": (images / energy) if energy and images else None}
    return out
