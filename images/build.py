"""Build the images of images/recipes.py through the Docker SDK, with no registry.

For each recipe: debootstrap a minimal Debian (with the recipe's packages) into a cache folder
outside the repository, copy a pyenv Python into it when the recipe asks, pip-install the
recipe's wheels inside it (downloaded once into the cache, installed with --no-index), stream
the rootfs into the engine as a tar with the era labels (DOCKER_HOST respected), and check the
image by running bench.py in it (network none). A finished rootfs and downloaded wheels are
reused; an existing tag is skipped unless --force.

    python images/build.py                 # every recipe (make images)
    python images/build.py 2018 2026       # some, by name
    python images/build.py --list
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT))

from recipes import BY_NAME, RECIPES, Recipe  # noqa: E402

from runner.backends import artifact  # noqa: E402

CACHE = Path(os.environ.get("MATRIX_IMAGE_CACHE", "/var/cache/matrix"))
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/sh"]',
]
SMOKE_ARGS = ["--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "16", "--dataset", "synthetic",
              "--iterations", "3", "--warmup", "1", "--device", "cpu", "--threads", "1", "--workers", "0"]


class BuildError(Exception):
    """A build cannot go on; the message is one line for the user."""


def say(msg: str) -> None:
    print(f"build: {msg}", file=sys.stderr, flush=True)


def apt_mirror(suite: str) -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line format), else deb.debian.org."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                key, sep, value = line.partition(":")
                if sep and not line.startswith((" ", "#")):
                    fields[key.strip()] = value.strip()
            uris = fields.get("URIs", "")
            if "debian" in uris and "security" not in uris and fields.get("Suites"):
                return uris.split()[0]
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in line:
                return next(p for p in parts[1:] if not p.startswith("["))
    return DEFAULT_MIRROR


def check_prerequisites(recipe: Recipe) -> None:
    """Everything a recipe needs from this machine, each missing one as one line."""
    if shutil.which("debootstrap") is None:
        raise BuildError("debootstrap not found: apt-get install debootstrap (scripts/docker-up.sh does)")
    if os.geteuid() != 0:
        raise BuildError(f"image {recipe.name}: debootstrap and chroot need root (sudo make images)")
    if recipe.pyenv and not pyenv_prefix(recipe.pyenv).is_dir():
        raise BuildError(f"image {recipe.name} needs Python {recipe.pyenv} from pyenv, not found at "
                         f"{pyenv_prefix(recipe.pyenv)}: pyenv install {recipe.pyenv}")


def pyenv_prefix(version: str) -> Path:
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    return Path(root) / "versions" / version


def run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise BuildError(f"{what} exited with {proc.returncode}: {' '.join(argv)}\n{tail}")


def download_wheels(recipe: Recipe) -> Path:
    """The recipe's wheels in the cache (downloaded once; the list of requirements marks it done)."""
    assert recipe.wheels is not None
    dest = CACHE / "wheels" / recipe.name
    marker = dest / ".requirements"
    wanted = "\n".join(recipe.wheels.requirements)
    if marker.exists() and marker.read_text() == wanted:
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    # The machine's global pip constraints pin packages for its own Python: not for another one.
    env = {**os.environ, "PIP_CONSTRAINT": ""}
    argv = [sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), *recipe.wheels.download_args,
            *recipe.wheels.requirements]
    say(f"downloading wheels for {recipe.name}: {' '.join(recipe.wheels.requirements)}")
    run(argv, "pip download", env)
    marker.write_text(wanted)
    return dest


def debootstrap(recipe: Recipe, rootfs: Path, mirror: str) -> None:
    if rootfs.exists():
        shutil.rmtree(rootfs)
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    argv = ["debootstrap", "--variant=minbase"]
    if recipe.packages:
        argv.append("--include=" + ",".join(recipe.packages))
    argv += [recipe.suite, str(rootfs), mirror]
    say(" ".join(argv))
    run(argv, "debootstrap")
    # Downloaded .debs and apt lists are half the size and nothing in the image needs them.
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (rootfs / sub).glob("*"):
            if item.is_file():
                item.unlink()


def copy_pyenv(recipe: Recipe, rootfs: Path) -> None:
    """pyenv's Python at the same path inside the rootfs, and `python3` on PATH pointing to it."""
    assert recipe.pyenv is not None
    src = pyenv_prefix(recipe.pyenv)
    dest = rootfs / str(src).lstrip("/")
    say(f"copying {src} into the rootfs")
    shutil.copytree(src, dest, symlinks=True)
    link = rootfs / "usr/local/bin/python3"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(recipe.interpreter)


def install_wheels(recipe: Recipe, rootfs: Path, wheels: Path) -> None:
    """pip inside the rootfs (chroot), from the copied wheels only: no index, no network."""
    assert recipe.wheels is not None
    inside = rootfs / "tmp" / "matrix-wheels"
    shutil.copytree(wheels, inside, dirs_exist_ok=True)
    try:
        argv = ["chroot", str(rootfs), recipe.interpreter, "-m", "pip", "install", "-q", "--no-index",
                "--no-cache-dir", "--disable-pip-version-check", "--find-links", "/tmp/matrix-wheels",
                *recipe.wheels.install_args, *recipe.wheels.requirements]
        say(f"pip install in the rootfs: {' '.join(recipe.wheels.requirements)}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        run(argv, "pip install in the rootfs", env)
    finally:
        shutil.rmtree(inside, ignore_errors=True)


def make_rootfs(recipe: Recipe, mirror: str | None) -> Path:
    """The finished rootfs of a recipe, reused when complete, otherwise made from scratch."""
    rootfs = CACHE / recipe.rootfs_name
    done = rootfs.with_name(rootfs.name + ".complete")
    if done.exists() and rootfs.is_dir():
        say(f"reusing rootfs {rootfs}")
        return rootfs
    wheels = download_wheels(recipe) if recipe.wheels else None
    t0 = time.time()
    debootstrap(recipe, rootfs, mirror or apt_mirror(recipe.suite))
    if recipe.pyenv:
        copy_pyenv(recipe, rootfs)
    if wheels is not None:
        install_wheels(recipe, rootfs, wheels)
    done.touch()
    say(f"rootfs {rootfs} ready in {time.time() - t0:.0f} s")
    return rootfs


def tar_stream(rootfs: Path) -> Iterator[bytes]:
    """The rootfs as a tar stream, in chunks, so the SDK sends it chunked without a temp file."""
    proc = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        while chunk := proc.stdout.read(1 << 20):
            yield chunk
    finally:
        proc.stdout.close()
        if proc.wait() != 0:
            raise BuildError(f"tar of {rootfs} exited with {proc.returncode}")


def import_rootfs(client, recipe: Recipe, rootfs: Path) -> str:  # type: ignore[no-untyped-def]
    repository, _, version = recipe.tag.rpartition(":")
    changes = BASE_CHANGES + [f"LABEL {k}={json.dumps(v)}" for k, v in recipe.labels().items()]
    say(f"importing {rootfs} as {recipe.tag}")
    client.api.import_image_from_stream(tar_stream(rootfs), repository=repository, tag=version,
                                        changes=changes)
    return str(client.images.get(recipe.tag).short_id)


def _bench_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = artifact.payload()
        info = tarfile.TarInfo("matrix-bench.pyz")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def smoke(client, recipe: Recipe) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """Train mnist_cnn for a few steps with the benchmark in a throw-away container (network none)."""
    container = client.containers.create(
        recipe.tag, [recipe.interpreter, "/tmp/matrix-bench.pyz", *SMOKE_ARGS], network_mode="none",
        labels={"matrix.managed": "true", "matrix.purpose": "image-smoke"})
    try:
        container.put_archive("/tmp", _bench_archive())
        container.start()
        status = container.wait(timeout=600)
        out = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    lines = [ln for ln in out.splitlines() if ln.startswith("MATRIX_RESULT ")]
    result = json.loads(lines[-1][len("MATRIX_RESULT "):]) if lines else {}
    if status.get("StatusCode") != 0 or result.get("status") != "ok":
        tail = "\n".join(out.strip().splitlines()[-10:])
        raise BuildError(f"{recipe.tag}: the benchmark does not train in the image:\n{tail}")
    torch_version = str(result.get("env", {}).get("torch", ""))
    if not torch_version.startswith(recipe.torch):
        raise BuildError(f"{recipe.tag}: torch is {torch_version}, the recipe says {recipe.torch}")
    return result


def docker_client():  # type: ignore[no-untyped-def]
    try:
        import docker
    except ImportError:
        raise BuildError("the Docker SDK is not importable: run with the project's .venv (make venv)") from None
    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure here means the same thing to the user
        raise BuildError(f"no Docker engine answers ({e}); start one with scripts/docker-up.sh") from None
    return client


def tag_exists(client, tag: str) -> bool:  # type: ignore[no-untyped-def]
    from docker.errors import ImageNotFound
    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


def build(client, recipe: Recipe, force: bool, mirror: str | None, drop_rootfs: bool) -> None:  # type: ignore[no-untyped-def]
    if not force and tag_exists(client, recipe.tag):
        say(f"{recipe.tag} exists, skipping")
        return
    check_prerequisites(recipe)
    t0 = time.time()
    rootfs = make_rootfs(recipe, mirror)
    short_id = import_rootfs(client, recipe, rootfs)
    result = smoke(client, recipe)
    env = result.get("env", {})
    say(f"{recipe.tag} ready ({short_id}; torch {env.get('torch')}, torchvision {env.get('torchvision')}, "
        f"Python {env.get('python')}; mnist_cnn trained) in {time.time() - t0:.0f} s")
    if drop_rootfs:
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.with_name(rootfs.name + ".complete").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"recipes to build (default: all): {', '.join(BY_NAME)}")
    ap.add_argument("--list", action="store_true", help="print the recipes and exit")
    ap.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    ap.add_argument("--mirror", default=None, help="Debian mirror (default: the one apt uses here)")
    ap.add_argument("--drop-rootfs", action="store_true",
                    help="delete each rootfs afterwards (by default it is kept for a faster rebuild)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        print(f"build: unknown image {', '.join(unknown)}; known: {', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    recipes = [BY_NAME[n] for n in args.names] if args.names else list(RECIPES)
    if args.list:
        for r in recipes:
            print(f"{r.name}\t{r.tag}\ttorch {r.torch}\tPython {r.python}\t{r.note}")
        return 0
    try:
        client = docker_client()
        for recipe in recipes:
            build(client, recipe, args.force, args.mirror, args.drop_rootfs)
    except BuildError as e:
        say(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
