"""images/build.py without an engine: the recipe table and the one-line answers to a missing prerequisite."""

from __future__ import annotations

from pathlib import Path

import build
import pytest
from recipes import BY_NAME, RECIPES


def test_recipes_have_unique_names_tags_and_rootfs_and_labels_with_the_era() -> None:
    assert len({r.name for r in RECIPES}) == len({r.tag for r in RECIPES}) == len(RECIPES)
    assert len({r.rootfs_name for r in RECIPES}) == len(RECIPES)
    for r in RECIPES:
        labels = r.labels()
        assert labels["matrix.era"] == r.era == r.date[:4]
        assert labels["matrix.era.torch"] == r.torch
    # The Docker tests, examples and benchmarks use this tag: it must stay.
    assert BY_NAME["2022"].tag == "matrix/debian-torch:1.13"
    assert [r.date for r in RECIPES] == sorted(r.date for r in RECIPES)


def test_missing_debootstrap_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError) as e:
        build.check_prerequisites(BY_NAME["2020"])
    assert "debootstrap not found" in str(e.value) and "\n" not in str(e.value)


def test_missing_pyenv_python_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/sbin/" + name)
    monkeypatch.setattr(build.os, "geteuid", lambda: 0)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    with pytest.raises(build.BuildError) as e:
        build.check_prerequisites(BY_NAME["2018"])
    msg = str(e.value)
    assert "needs Python 3.6.15 from pyenv" in msg and "pyenv install 3.6.15" in msg and "\n" not in msg


def test_not_root_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/sbin/" + name)
    monkeypatch.setattr(build.os, "geteuid", lambda: 1000)
    with pytest.raises(build.BuildError, match="need root"):
        build.check_prerequisites(BY_NAME["2025"])


def test_unknown_recipe_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert build.main(["1999"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown image 1999" in err and "2018" in err and "2026" in err


def test_list_prints_every_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    assert build.main(["--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in out] == [r.name for r in RECIPES]
