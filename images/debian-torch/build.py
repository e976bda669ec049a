"""Build the CPU test image matrix/debian-torch:1.13 from Debian's packages, with no registry.

No image registry is reachable from these machines, so the image is a Debian bookworm
rootfs made by debootstrap with python3-torch (1.13) and python3-torchvision (0.14), imported
into the engine through the Docker SDK (DOCKER_HOST respected), then checked by importing
torch in a throw-away container. The rootfs lives outside the repository and is reused.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound

TAG = "matrix/debian-torch:1.13"
CACHE = Path("/var/cache/matrix")
PACKAGES = ("python3-torch", "python3-torchvision", "python3-numpy")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/sh"]',
    "LABEL org.opencontainers.image.title=matrix-debian-torch",
]


def apt_mirror(suite: str) -> str:
    """The Debian mirror this machine's apt uses for `suite` (deb822 or one-line format)."""
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:
        for stanza in path.read_text().split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                key, sep, value = line.partition(":")
                if sep and not line.startswith((" ", "#")):
                    fields[key.strip()] = value.strip()
            if suite in fields.get("Suites", "").split() and "security" not in fields.get("URIs", ""):
                return fields["URIs"].split()[0]
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and suite in parts[2:] and "security" not in line:
                return next(p for p in parts[1:] if not p.startswith("["))
    return DEFAULT_MIRROR


def debootstrap(rootfs: Path, suite: str, mirror: str) -> None:
    """A minimal Debian with PyTorch; a finished rootfs is reused, a partial one redone."""
    done = rootfs.with_name(rootfs.name + ".complete")
    if done.exists() and rootfs.is_dir():
        print(f"build: reusing rootfs {rootfs}", file=sys.stderr)
        return
    if shutil.which("debootstrap") is None:
        raise SystemExit("build: debootstrap not found: apt-get install debootstrap (scripts/docker-up.sh does)")
    if rootfs.exists():
        shutil.rmtree(rootfs)
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    argv = ["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), suite, str(rootfs), mirror]
    print(f"build: {' '.join(argv)}", file=sys.stderr)
    t0 = time.time()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    # Downloaded .debs and apt lists are half the size and nothing in the image needs them.
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (rootfs / sub).glob("*"):
            if item.is_file():
                item.unlink()
    done.touch()
    print(f"build: rootfs ready in {time.time() - t0:.0f} s", file=sys.stderr)


def tar_stream(rootfs: Path) -> Iterator[bytes]:
    """The rootfs as a tar stream, in chunks, so the SDK sends it chunked without a temp file."""
    proc = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        while chunk := proc.stdout.read(1 << 20):
            yield chunk
    finally:
        proc.stdout.close()
        if proc.wait() != 0:
            raise RuntimeError(f"tar of {rootfs} exited with {proc.returncode}")


def import_rootfs(client: docker.DockerClient, rootfs: Path, tag: str) -> str:
    repository, _, version = tag.rpartition(":")
    t0 = time.time()
    print(f"build: importing {rootfs} as {tag}", file=sys.stderr)
    client.api.import_image_from_stream(tar_stream(rootfs), repository=repository, tag=version,
                                        changes=CHANGES)
    image = client.images.get(tag)
    print(f"build: imported {image.short_id} in {time.time() - t0:.0f} s", file=sys.stderr)
    return str(image.id)


def smoke(client: docker.DockerClient, tag: str) -> str:
    """Import torch and torchvision in a throw-away container: the image must really work."""
    container = client.containers.create(
        tag, ["python3", "-c", "import torch, torchvision; print(torch.__version__, torchvision.__version__)"],
        network_mode="none", labels={"matrix.managed": "true", "matrix.purpose": "image-smoke"})
    try:
        container.start()
        status = container.wait(timeout=300)
        out = container.logs().decode(errors="replace").strip()
        if status.get("StatusCode") != 0:
            raise SystemExit(f"build: {tag} cannot import torch:\n{out}")
        return out
    finally:
        container.remove(force=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tag", default=TAG)
    ap.add_argument("--suite", default="bookworm")
    ap.add_argument("--mirror", default=None, help="Debian mirror (default: the one apt uses here)")
    ap.add_argument("--rootfs", type=Path, default=CACHE / "debian-torch-rootfs")
    ap.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    ap.add_argument("--drop-rootfs", action="store_true",
                    help="delete the rootfs afterwards (by default it is kept for a faster rebuild)")
    args = ap.parse_args(argv)

    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure here means the same thing to the user
        print(f"build: no Docker engine answers ({e}); start one with scripts/docker-up.sh", file=sys.stderr)
        return 1
    if not args.force:
        try:
            image = client.images.get(args.tag)
            print(f"build: {args.tag} exists ({image.short_id}), skipping", file=sys.stderr)
            return 0
        except ImageNotFound:
            pass
    t0 = time.time()
    debootstrap(args.rootfs, args.suite, args.mirror or apt_mirror(args.suite))
    try:
        import_rootfs(client, args.rootfs, args.tag)
    except APIError as e:
        print(f"build: import failed: {e}", file=sys.stderr)
        return 1
    versions = smoke(client, args.tag)
    print(f"build: {args.tag} ready (torch, torchvision: {versions}) in {time.time() - t0:.0f} s",
          file=sys.stderr)
    if args.drop_rootfs:
        shutil.rmtree(args.rootfs, ignore_errors=True)
        args.rootfs.with_name(args.rootfs.name + ".complete").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
