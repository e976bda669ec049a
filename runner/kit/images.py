"""A generated JPEG image folder (CIFAR-sized, ten classes) for the write-up that measured the data loader:
decoding JPEGs on the CPU is the work its DataLoader workers do. Made with Pillow, deterministically, where
it is missing (it never travels with the kit's state)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from runner.base import safewrite

CLASSES = 10
SIZE = 32


def make_image_folder(folder: Path, per_class: int, seed: int = 0) -> int:
    """Write CLASSES x per_class JPEGs into folder/class_N/; returns how many were written (0: already there)."""
    marker = folder / "made.json"
    spec = {"classes": CLASSES, "per_class": per_class, "size": SIZE, "seed": seed}
    try:
        if json.loads(marker.read_text()) == spec:
            return 0
    except (OSError, ValueError):
        pass
    from PIL import Image  # Pillow: installed with matplotlib

    rng = random.Random(seed)
    written = 0
    for k in range(CLASSES):
        d = folder / f"class_{k}"
        d.mkdir(parents=True, exist_ok=True)
        base = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        tint = Image.new("RGB", (SIZE, SIZE), base)
        for i in range(per_class):
            noise = Image.frombytes("RGB", (SIZE, SIZE), rng.randbytes(SIZE * SIZE * 3))
            Image.blend(noise, tint, 0.6).save(d / f"{i:05d}.jpg", quality=90)
            written += 1
    safewrite.write_text(marker, json.dumps(spec))
    return written
