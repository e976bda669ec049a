"""`matrix diff`: what differs between two environments, as their newest repeats recorded it."""

from __future__ import annotations

from pathlib import Path

from runner.commands.base import Command, register


@register
class DiffCommand(Command):
    name = "diff"
    help = ("What differs between two environments, as their newest repeats recorded it: PyTorch, CUDA, cuDNN, NCCL,\n"
            "Python, numpy, the OS, the image, the hardware, the variables that steer the libraries, torch's build, how\n"
            "each precision ran, and the Python and system packages.")

    def run(self, a: str, b: str, db: Path, fmt: str | None, everything: bool) -> int:
        from runner.report.diff import diff_command
        self.say(diff_command(db, a, b, fmt, everything))
        return 0
