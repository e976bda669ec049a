"""scripts/apt-wait.sh: every install step waits, with a bound, for another apt-get or dpkg holding a lock."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "scripts" / "apt-wait.sh"
LOCKED = "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"


def fake_apt(tmp_path: Path, busy: int, then: int = 0) -> Path:
    """An apt-get that says the lists' lock is held `busy` times, then exits `then`; it logs its arguments."""
    fake = tmp_path / "apt-get"
    fake.write_text(f"""#!/usr/bin/env bash
echo "$*" >> {tmp_path}/calls
n=$(wc -l < {tmp_path}/calls)
if [ "$n" -le {busy} ]; then echo "{LOCKED}" >&2; exit 100; fi
exit {then}
""")
    fake.chmod(0o755)
    return fake


def apt_get(tmp_path: Path, fake: Path, wait: int, *args: str) -> subprocess.CompletedProcess[str]:
    script = f'set -euo pipefail; source {HELPER}; apt_get {" ".join(args)}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "APT_GET": str(fake), "APT_LOCK_WAIT": str(wait),
                               "APT_LOCK_POLL": "0"})


def test_a_held_lists_lock_is_waited_for_and_the_step_then_runs(tmp_path: Path) -> None:
    done = apt_get(tmp_path, fake_apt(tmp_path, busy=3), 30, "update", "-qq")
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 4 and all(c == "-o DPkg::Lock::Timeout=30 update -qq" for c in calls), calls
    assert done.stderr.count("another package manager holds its lock") == 3


def test_the_wait_is_bounded_and_says_why_it_gave_up(tmp_path: Path) -> None:
    done = apt_get(tmp_path, fake_apt(tmp_path, busy=10**6), 0, "install", "-y", "x")
    assert done.returncode == 100
    assert done.stderr.strip().splitlines()[-1].startswith("apt-get: another package manager still holds its lock")


def test_another_failure_is_not_retried(tmp_path: Path) -> None:
    done = apt_get(tmp_path, fake_apt(tmp_path, busy=0, then=1), 30, "install", "-y", "nosuchpackage")
    assert done.returncode == 1 and len((tmp_path / "calls").read_text().splitlines()) == 1


def test_every_install_script_goes_through_the_helper() -> None:
    for script in sorted(set((ROOT / "scripts").glob("*.sh")) - {HELPER}):
        text = script.read_text()
        calls = [ln for ln in text.splitlines() if "apt-get " in ln and not ln.lstrip().startswith("#")
                 and "say " not in ln and "echo " not in ln]
        assert not calls, f"{script.name} runs apt-get without waiting for its lock: {calls}"
        if "apt_get " in text:
            assert 'source "$(dirname "${BASH_SOURCE[0]}")/apt-wait.sh"' in text, script.name
