"""The images matrix builds without a registry: one row per image, built by images/build.py.

Each recipe is a Debian root filesystem made by debootstrap, optionally with a Python copied from
pyenv on this machine and wheels installed by pip inside the rootfs (from a local download, no
index). The era labels let reports order environments by the date of their PyTorch release.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Wheels:
    """Wheels downloaded once (outside the repository) and pip-installed inside the rootfs."""

    requirements: tuple[str, ...]
    # Extra `pip download` arguments, e.g. the target Python and platform of another interpreter.
    download_args: tuple[str, ...] = ()
    # Extra `pip install` arguments inside the rootfs (e.g. PEP 668's --break-system-packages).
    install_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recipe:
    name: str
    tag: str
    era: str  # the year the PyTorch release came out
    date: str  # release date of that PyTorch (YYYY-MM-DD)
    torch: str  # expected torch.__version__ prefix, checked by the smoke run
    torchvision: str
    python: str  # the interpreter's version (label) ...
    interpreter: str  # ... and its path inside the image
    suite: str  # Debian suite for debootstrap
    packages: tuple[str, ...] = ()
    pyenv: str | None = None  # a pyenv version copied from this machine to the same path
    wheels: Wheels | None = None
    rootfs: str | None = None  # cache folder name (default: era-NAME-rootfs)
    note: str = ""
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def rootfs_name(self) -> str:
        return self.rootfs or f"era-{self.name}-rootfs"

    def labels(self) -> dict[str, str]:
        return {"org.opencontainers.image.title": f"matrix-{self.name}",
                "org.opencontainers.image.description": self.note,
                "matrix.era": self.era, "matrix.era.date": self.date,
                "matrix.era.torch": self.torch, "matrix.era.torchvision": self.torchvision,
                "matrix.era.python": self.python, **self.extra_labels}


PYENV_PY36 = "3.6.15"
DEBIAN_TORCH = ("python3-torch", "python3-torchvision", "python3-numpy")

RECIPES: tuple[Recipe, ...] = (
    Recipe(
        name="2018", tag="matrix/era:2018-torch1.0", era="2018", date="2018-12-07",
        torch="1.0.0", torchvision="0.2.1", python="3.6.15",
        interpreter=f"/root/.pyenv/versions/{PYENV_PY36}/bin/python3.6",
        suite="bookworm", packages=("libgomp1",), pyenv=PYENV_PY36,
        wheels=Wheels(
            requirements=("torch==1.0.0", "torchvision==0.2.1", "numpy==1.15.4", "pillow==5.4.1",
                          "six==1.12.0"),
            download_args=("--python-version", "3.6", "--platform", "manylinux1_x86_64",
                           "--only-binary=:all:", "--no-deps")),
        note="PyTorch 1.0.0 (the oldest on PyPI, cp36 manylinux1) on pyenv's Python 3.6.15, Debian bookworm base"),
    Recipe(
        name="2020", tag="matrix/era:2020-torch1.7", era="2020", date="2020-12-10",
        # Debian's 1.7.1 and 0.8.2 packages call themselves 1.7.0a0 and 0.8.0a0.
        torch="1.7", torchvision="0.8", python="3.9", interpreter="/usr/bin/python3",
        # debootstrap does not resolve virtual packages: bullseye's python3-torch pulls OpenCV, GTK
        # and dconf-service, which needs a dbus-session-bus; dbus-x11 provides one.
        suite="bullseye", packages=(*DEBIAN_TORCH, "dbus-x11"),
        note="Debian bullseye's python3-torch 1.7.1 and python3-torchvision 0.8.2"),
    Recipe(
        name="2022", tag="matrix/debian-torch:1.13", era="2022", date="2022-10-28",
        torch="1.13", torchvision="0.14", python="3.11", interpreter="/usr/bin/python3",
        suite="bookworm", packages=DEBIAN_TORCH, rootfs="debian-torch-rootfs",
        note="Debian bookworm's python3-torch 1.13 and python3-torchvision 0.14 (the CPU test image)",
        extra_labels={"org.opencontainers.image.title": "matrix-debian-torch"}),
    Recipe(
        name="2025", tag="matrix/era:2025-torch2.6", era="2025", date="2025-01-29",
        torch="2.6.0", torchvision="0.21", python="3.13", interpreter="/usr/bin/python3",
        suite="trixie", packages=DEBIAN_TORCH,
        note="Debian trixie's python3-torch 2.6.0 and python3-torchvision 0.21"),
    Recipe(
        name="2026", tag="matrix/era:2026-torch2.13", era="2026", date="2026-07-03",
        torch="2.13.0", torchvision="none", python="3.11", interpreter="/usr/bin/python3",
        suite="bookworm", packages=("python3", "python3-pip", "libgomp1"),
        wheels=Wheels(
            requirements=("torch==2.13.0", "numpy"),
            download_args=("--python-version", "3.11", "--only-binary=:all:",
                           "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
                           "--platform", "manylinux_2_17_x86_64"),
            install_args=("--break-system-packages",)),
        # The only torchvision 0.28 wheel reachable here is PyPI's CUDA build: against the CPU torch
        # its C++ ops cannot load and `import torchvision` fails ("operator torchvision::nms does
        # not exist"), and download.pytorch.org (the +cpu build) is not reachable. So no torchvision:
        # torchvision models in this image are `unsupported` with that reason.
        note="the PyTorch 2.13.0 CPU wheel (built 2026-07-03) on Debian bookworm's Python 3.11, no torchvision"),
)

BY_NAME = {r.name: r for r in RECIPES}
# The image the Docker tests use: built by `make services` on its own.
TEST_IMAGE = "2022"
