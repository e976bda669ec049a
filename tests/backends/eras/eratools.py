"""Helpers of the era tests: the benchmark run case after case in one idle container of an era image."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from typing import Any

from recipes import Recipe

from runner.backends import artifact


@dataclass
class BenchRun:
    code: int
    output: str
    result: dict[str, Any]


class EraBox:
    """One idle container of an era image (network none) in which the benchmark runs, case after case."""

    def __init__(self, client: Any, recipe: Recipe) -> None:
        self.recipe = recipe
        self.container = client.containers.create(
            recipe.tag, ["sleep", "infinity"], network_mode="none", environment={"OMP_NUM_THREADS": "1"},
            labels={"matrix.managed": "true", "matrix.purpose": "era-test"})
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            data = artifact.payload()  # the zipapp, as the backends ship it
            info = tarfile.TarInfo("matrix-bench.pyz")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        self.container.put_archive("/tmp", buf.getvalue())
        self.container.start()

    def bench(self, *args: str, env: dict[str, str] | None = None) -> BenchRun:
        argv = [self.recipe.interpreter, "/tmp/matrix-bench.pyz", "--dataset", "synthetic", "--device", "cpu",
                "--threads", "1", "--workers", "0", *args]
        # stdout and stderr apart, as the Docker backend reads them (runner/backends/docker/engine.py): merged, a
        # log line on stderr can land inside the result line where Docker read the stdout pipe in two chunks
        # (seen: a 6-KiB line cut at 4,096 bytes by a line of the benchmark's own log).
        code, (out, err) = self.container.exec_run(argv, environment=env, demux=True)
        stdout = (out or b"").decode(errors="replace")
        text = stdout + (err or b"").decode(errors="replace")
        lines = [ln for ln in stdout.splitlines() if ln.startswith("MATRIX_RESULT ")]
        result = json.loads(lines[-1][len("MATRIX_RESULT "):]) if lines else {}
        return BenchRun(code, text, result)

    def workload(self, argv: list[str], parser: dict[str, Any]) -> BenchRun:
        """The workload launcher (`bench.pyz workload SPEC`) running `argv` (its {python} this era's interpreter)."""
        spec = {"v": 1, "name": "t", "argv": argv, "values": {}, "files": None, "params": {}, "parser": parser}
        code, (out, err) = self.container.exec_run([self.recipe.interpreter, "/tmp/matrix-bench.pyz", "workload",
                                                    json.dumps(spec)], demux=True)
        stdout = (out or b"").decode(errors="replace")
        lines = [ln for ln in stdout.splitlines() if ln.startswith("MATRIX_RESULT ")]
        result = json.loads(lines[-1][len("MATRIX_RESULT "):]) if lines else {}
        return BenchRun(code, stdout + (err or b"").decode(errors="replace"), result)

    def remove(self) -> None:
        self.container.remove(force=True)
