"""The ordered environments of a bisect and its one cell in each.

Environments are named from the matrix file (in the order given, or the file's order), or generated from image
patterns: one brace group per pattern, expanded in order.

    nvcr.io/nvidia/pytorch:{24.01..25.09}-py3    year.month: 24.01, 24.02, ... 24.12, 25.01, ... 25.09
    registry/img:{2023.11..2024.02}               the same with four-digit years
    registry/img:v{1..12}                         integers: 1, 2, ... 12 ({01..12}: zero-padded to the width)
    registry/img:{24.01..25.09..3}                a step: every third month (or every third integer)
    registry/img:{24.01,24.03,24.10}-py3          a list, in its order
    registry/img:2.1                              no braces: the image itself

A generated environment copies a template environment of the matrix file (`--template NAME`: its env, mounts,
gpus, shm and network settings) with the image replaced, or, without one, is the ad-hoc docker environment of
`matrix run --image`; either way it is named after its image (pytorch-24.01-py3), so a bisect and a `matrix run`
of the same image and settings share their cells.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from runner import matrix as matrix_mod
from runner.base.errors import ConfigError
from runner.domain.cells import Cell, EnvironmentBase, shown_params

MOST_ENVIRONMENTS = 1000
_GROUP = re.compile(r"\{([^{}]*)\}")
_MONTH = re.compile(r"^(\d{2}|\d{4})\.(\d{2})$")
_INT = re.compile(r"^-?\d+$")


def _bounded(a: int, b: int, step: int, pattern: str) -> None:
    """Refuse a range longer than a bisect takes before its values are made (img:{1..1000000000})."""
    n = abs(b - a) // step + 1
    if n > MOST_ENVIRONMENTS:
        raise ConfigError(f"--images {pattern}: {n} images, more than {MOST_ENVIRONMENTS}")


def _range(spec: str, pattern: str) -> list[str]:
    """The values of one brace group (without its braces)."""
    if ".." not in spec:
        items = [s.strip() for s in spec.split(",")]
        if len(items) < 2 or not all(items):
            raise ConfigError(f"--images {pattern}: {{{spec}}}: write a range {{A..B}} or a list {{a,b,c}} of at "
                              "least two non-empty items")
        return items
    parts = spec.split("..")
    if len(parts) not in (2, 3) or not all(p.strip() for p in parts):
        raise ConfigError(f"--images {pattern}: {{{spec}}}: a range is {{A..B}} or {{A..B..STEP}}")
    start, end = parts[0].strip(), parts[1].strip()
    step = 1
    if len(parts) == 3:
        if not parts[2].strip().isdigit() or int(parts[2]) < 1:
            raise ConfigError(f"--images {pattern}: {{{spec}}}: the step must be a whole number of 1 or more")
        step = int(parts[2])
    ms, me = _MONTH.match(start), _MONTH.match(end)
    if ms and me:
        width = len(ms.group(1))
        if len(me.group(1)) != width:
            raise ConfigError(f"--images {pattern}: {{{spec}}}: both ends need years of the same width (24.01..25.09 "
                              "or 2024.01..2025.09)")
        months = []
        for m in (ms, me):
            month = int(m.group(2))
            if not 1 <= month <= 12:
                raise ConfigError(f"--images {pattern}: {{{spec}}}: month {m.group(2)} is not 01 to 12")
            months.append(int(m.group(1)) * 12 + month - 1)
        sign = 1 if months[1] >= months[0] else -1
        _bounded(months[0], months[1], step, pattern)
        return [f"{v // 12:0{width}d}.{v % 12 + 1:02d}" for v in range(months[0], months[1] + sign, sign * step)]
    if _INT.match(start) and _INT.match(end):
        a, b = int(start), int(end)
        padded = any(len(x.lstrip("-")) > 1 and x.lstrip("-").startswith("0") for x in (start, end))
        width = max(len(start), len(end)) if padded else 0
        sign = 1 if b >= a else -1
        _bounded(a, b, step, pattern)
        return [f"{v:0{width}d}" for v in range(a, b + sign, sign * step)]
    raise ConfigError(f"--images {pattern}: {{{spec}}}: a range needs two integers (1..12, 01..12) or two "
                      "year.month values (24.01..25.09); a list is {a,b,c}")


def expand_pattern(pattern: str) -> list[str]:
    """An image pattern's images, in order (see the module's docstring)."""
    text = pattern.strip()
    if not text:
        raise ConfigError("--images: an empty pattern; e.g. nvcr.io/nvidia/pytorch:{24.01..25.09}-py3")
    groups = list(_GROUP.finditer(text))
    leftover = _GROUP.sub("", text)
    if "{" in leftover or "}" in leftover:
        raise ConfigError(f"--images {pattern}: unbalanced or nested braces; one {{A..B}} or {{a,b}} group")
    if len(groups) > 1:
        raise ConfigError(f"--images {pattern}: one brace group per pattern (several would make a grid, which has "
                          "no order); give several --images for several ranges")
    if not groups:
        images = [text]
    else:
        g = groups[0]
        images = [text[:g.start()] + value + text[g.end():] for value in _range(g.group(1), pattern)]
    for image in images:
        if any(c.isspace() for c in image):
            raise ConfigError(f"--images {pattern}: {image!r} is not an image reference (it holds a space)")
    if len(images) > MOST_ENVIRONMENTS:
        raise ConfigError(f"--images {pattern}: {len(images)} images, more than {MOST_ENVIRONMENTS}")
    return images


def generated(images: Sequence[str], template: EnvironmentBase | None, gpus: str | None) -> list[EnvironmentBase]:
    """One environment per image: the template with its image replaced, or the ad-hoc docker environment."""
    from runner.backends.docker import adhoc_environment
    from runner.backends.docker.config import image_env_name

    out: list[EnvironmentBase] = []
    for image in images:
        if template is None:
            out.append(adhoc_environment(image, gpus))
        else:
            env = template.model_copy(update={"name": image_env_name(image), "image": image})
            out.append(type(template).model_validate(env.model_dump()))
    return out


@dataclass(frozen=True)
class Bisection:
    """The ordered environments and the one cell of each (the same params everywhere)."""

    environments: tuple[EnvironmentBase, ...]
    cells: tuple[Cell, ...]
    matrix: matrix_mod.Matrix

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.environments]

    def cell_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in shown_params(self.cells[0].params).items())


def plan(m: matrix_mod.Matrix, names: Sequence[str] = (), images: Sequence[str] = (), template: str | None = None,
         gpus: str | None = None, only: Sequence[str] = ()) -> Bisection:
    """The bisect's environments, in order, and its cell in each: `names` from the matrix file (all of them, in the
    file's order, when neither names nor images are given), or the images of `images` patterns. `only` must
    pick exactly one cell in each environment, the same params in all."""
    if names and images:
        raise ConfigError("give environments by name or --images patterns, not both")
    if (template or gpus) and not images:
        raise ConfigError("--template and --gpus go with --images (environments of the matrix file say their own)")
    if template and gpus:
        raise ConfigError(f"--gpus {gpus} with --template {template}: the template says its own GPUs (`gpus:`)")
    if images:
        envs, source = _from_images(m, images, template, gpus)
    else:
        envs = _from_names(m, names)
        source = m
    if len(envs) < 2:
        raise ConfigError(f"a bisect needs at least two environments in order; got {len(envs)}"
                          + ("" if names or images else f" in {m.path or 'the matrix'}"))
    seen: set[str] = set()
    for e in envs:
        if e.name in seen:
            raise ConfigError(f"environment {e.name!r} is listed twice; a bisect needs each once, in order")
        seen.add(e.name)
    cells = _cells(source, envs, only)
    return Bisection(tuple(envs), tuple(cells), replace(source, environments=tuple(envs)))


def _from_names(m: matrix_mod.Matrix, names: Sequence[str]) -> list[EnvironmentBase]:
    if not names:
        return list(m.environments)
    known = [e.name for e in m.environments]
    missing = [n for n in names if n not in known]
    if missing:
        raise ConfigError(f"{m.path or 'the matrix'}: no environment {', '.join(map(repr, missing))}; environments: "
                          f"{', '.join(known)}")
    return [m.environment(n) for n in names]


def _from_images(m: matrix_mod.Matrix, patterns: Sequence[str], template: str | None, gpus: str | None
                 ) -> tuple[list[EnvironmentBase], matrix_mod.Matrix]:
    base: EnvironmentBase | None = None
    if template is not None:
        base = m.environment(template)
        if not hasattr(base, "image"):
            with_image = [e.name for e in m.environments if hasattr(e, "image")]
            raise ConfigError(f"--template {template}: a {base.backend} environment has no image to replace; "
                              f"environments with an image: {', '.join(with_image) or '(none)'}")
    images = [image for p in patterns for image in expand_pattern(p)]
    envs = generated(images, base, gpus)
    from runner.backends.workloads import adopted
    workloads = {**m.workloads, **adopted(m.workloads, template, [e.name for e in envs], "--images")}
    if base is None:
        # As `matrix run --image`: the axes in the image, rules that name an environment left out.
        axes = m.axes
        if gpus and axes.device == ["cpu"]:
            axes = axes.model_copy(update={"device": ["cuda"]})
        source = replace(m, axes=axes, environments=(envs[0],), workloads=workloads,
                         include=tuple({k: v for k, v in r.items() if k != "environment"} for r in m.include),
                         exclude=tuple(r for r in m.exclude if "environment" not in r))
    else:
        mine = [r for r in m.include if r.get("environment") in (None, base.name)]
        source = replace(m, environments=(base,), include=tuple(mine), workloads=workloads,
                         exclude=tuple(r for r in m.exclude if r.get("environment") in (None, base.name)))
    return envs, source


def _cells(source: matrix_mod.Matrix, envs: Sequence[EnvironmentBase], only: Sequence[str]) -> list[Cell]:
    """The selected cell of each environment. For generated environments the template's (or the first image's)
    cell is the pattern for all of them."""
    generated_envs = [e for e in envs if e.name not in {x.name for x in source.environments}]
    all_cells = matrix_mod.select(source.cells(), (), only)
    if generated_envs:
        if len(all_cells) != 1:
            raise ConfigError(_not_one(all_cells, "the images", only))
        cell = all_cells[0]
        return [Cell(e, cell.params, cell.run, source.workloads.get(e.name)) for e in envs]
    by_env: dict[str, list[Cell]] = {}
    for c in all_cells:
        by_env.setdefault(c.env_name, []).append(c)
    cells = []
    for e in envs:
        mine = by_env.get(e.name, [])
        if len(mine) != 1:
            raise ConfigError(_not_one(mine, f"environment {e.name}", only))
        cells.append(mine[0])
    first = dict(cells[0].params)
    for c in cells[1:]:
        if dict(c.params) != first:
            differ = sorted(k for k in first.keys() | c.params.keys() if first.get(k) != c.params.get(k))
            raise ConfigError(f"the cell differs between environments {cells[0].env_name} and {c.env_name} "
                              f"({', '.join(differ)}): a bisect compares the same cell everywhere; add --only for "
                              f"{', '.join(differ)}")
    return cells


def _not_one(cells: Sequence[Cell], where: str, only: Sequence[str]) -> str:
    said = " ".join(f"--only {o}" for o in only) or "no --only"
    if not cells:
        return (f"{said} picks no cell in {where} (an exclude rule may remove it there); a bisect needs the same "
                "cell in every environment")
    varying = sorted({k for c in cells for k in c.params if len({str(x.params.get(k)) for x in cells}) > 1})
    return (f"{said} picks {len(cells)} cells in {where}; a bisect follows one: add --only for "
            f"{', '.join(varying) or 'the axes'} (e.g. --only {varying[0] if varying else 'model'}="
            f"{cells[0].params.get(varying[0]) if varying else cells[0].params.get('model')})")
