"""Several processes, one measurement: the rank layout from torchrun's or Slurm's variables, the env://
rendezvous, and the few collectives the result needs (hostnames, sums, maxima)."""

import os
import socket

from .compat import run_quiet, torch
from .errors import Unsupported


def dist_layout():
    """(rank, world_size, local_rank) from torchrun's variables, else Slurm's when it launched several."""
    env = os.environ
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", rank)))
        return rank, world, local
    if int(env.get("SLURM_NTASKS", "1") or 1) > 1 and env.get("SLURM_PROCID") is not None:
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
    return 0, 1, 0


def _slurm_master_addr():
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    if nodelist:
        out = run_quiet(["scontrol", "show", "hostnames", nodelist])
        if out:
            return out.splitlines()[0].strip()
    return os.environ.get("SLURM_LAUNCH_NODE_IPADDR") or "127.0.0.1"


def init_distributed(rank, world, device):
    """env:// rendezvous; NCCL on GPU, gloo on CPU. Slurm runs get MASTER_* defaults."""
    import torch.distributed as dist
    if not dist.is_available():
        raise Unsupported("torch.distributed is not available in this torch build")
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = _slurm_master_addr()
    if "MASTER_PORT" not in os.environ:
        job = os.environ.get("SLURM_JOB_ID", "")
        os.environ["MASTER_PORT"] = str(15000 + int(job) % 20000) if job.isdigit() else "29500"
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world)
    return dist


def shutdown_distributed(dist):
    """Destroy the process group while the interpreter is whole.

    The DDP model holds the group and its gloo worker threads through reference cycles;
    if it is still alive when the interpreter finalises, tearing the group down there
    aborts the process ("terminate called without an active exception", exit -6) after
    the result was printed. Collecting first frees it here instead: 4 aborts in 40 two-rank
    CPU runs before, none in 60 after.
    """
    import gc
    gc.collect()
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def gather_hostnames(dist, world, device):
    """Every rank's hostname, in rank order: which nodes the run really spanned.

    Plain all_gather of fixed-size code-point tensors (all_gather_object needs torch >= 1.8).
    """
    width = 64
    name = socket.gethostname()[:width]
    mine = torch.zeros(width, dtype=torch.float64, device=device)
    for i, ch in enumerate(name):
        mine[i] = float(ord(ch))
    every = [torch.zeros(width, dtype=torch.float64, device=device) for _ in range(world)]
    dist.all_gather(every, mine)
    return ["".join(chr(int(c)) for c in t.cpu().tolist() if c > 0) for t in every]


def _reduce_op(dist, name):
    ops = getattr(dist, "ReduceOp", None) or getattr(dist, "reduce_op")  # reduce_op: torch < 1.0
    return getattr(ops, name)


def all_reduce_values(dist, values, op, device):
    """All-reduce a few floats (NCCL needs them on the GPU)."""
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=_reduce_op(dist, op))
    return t.cpu().tolist()
