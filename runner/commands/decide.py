"""The decisions commands share, what they print and whether they fail: the references over the store (`check`,
and the end of `run` and `collect`: `run_decisions`), and the regression gate inside `compare --fail-on`
(`gate_command`, `with_gate`). The decisions themselves are runner/analysis/'s (references, gate, verdict)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from runner import analysis as an
from runner.analysis import gate, gate_entries, references
from runner.analysis.adaptive import Stop
from runner.analysis.compare import pair_keys, same_definition
from runner.analysis.verdict import Verdict, exit_status, parse_policy
from runner.base.errors import ConfigError, StoreError
from runner.base.exitcodes import Exit
from runner.domain.cells import Cell
from runner.execution import adaptive_rounds as schedule
from runner.execution import decided_rounds
from runner.matrix import Matrix
from runner.report import decisions as present
from runner.store import Store
from runner.store.exchange import store_id


def _frame(store: Store) -> pd.DataFrame:
    return an.frame(store.rows())


def verdicts(m: Matrix, cells: Sequence[Cell], store: Store) -> list[references.Judgement]:
    """The verdicts of the matrix's references over the selected cells, from what the store holds."""
    return references.judge(m.references, cells, _frame(store), decided_rounds.alpha_for(cells))


def run_decisions(m: Matrix, cells: Sequence[Cell], store: Store) -> tuple[str, Exit]:
    """What `matrix run` prints after its summary: the adaptive cells' stopping points and the reference
    verdicts; and its exit status for them: 4 when a reference failed, 5 when one is undecided (unless its
    entry's `undecided:` counts it as passed or failed), else 0."""
    parts: list[present.Table | str] = []
    titles = []
    states = schedule.states(cells, store)
    if states:
        parts.append(present.adaptive_table(states))
        titles.append("Adaptive repeats")
        at_max = sum(s.assessment.stop is Stop.MAX for s in states)
        if at_max:
            parts.append(f"{at_max} of {len(states)} cells reached max repeats with the interval still wider "
                         "than the target: their numbers are noisier than asked.")
    status = Exit.OK
    frame = _frame(store) if (m.references or m.gates) else pd.DataFrame()
    alpha = decided_rounds.alpha_for(cells)  # a run that looked again after adding repeats: alpha over its looks
    if m.references:
        js = references.judge(m.references, cells, frame, alpha)
        if js:  # a selection (--only) that no reference covers decides nothing
            parts += [present.verdict_table(js), references.summary_line(js)]
            titles.append("References")
            decided = references.exit_status(js)
            status = Exit.REFERENCE_FAILED if decided is Exit.FAILED else decided
    mine = frame[frame["cell_key"].isin({c.key for c in cells})] if len(frame) else frame
    envs = {c.env_name for c in cells}
    for entry in m.gates:
        checks = gate_entries.evaluate(entry, mine, alpha)
        if not checks:
            named = gate_entries.environments(entry, m.environments)
            if not (named[0] & envs and named[1] & envs):  # a selection (--only) that leaves a side out decides nothing
                continue
            parts.append(f"{entry.b} against {entry.a}: Gate undecided ({', '.join(entry.specs)}): nothing to check, "
                         f"a side has no repeat stored ({gate_entries.empty_side(entry, mine)}).")
            status = status if status is Exit.REFERENCE_FAILED else Exit.UNDECIDED
            continue
        if gate.rows(checks):
            parts.append(present.gate_table(checks))
            titles.append(f"Gate: {entry.title}")
        parts.append(f"{entry.b} against {entry.a}: {gate.summary_line(list(entry.rules), checks, entry.undecided)}")
        decided = exit_status([c.verdict for c in checks], entry.undecided)
        worse = Exit.REFERENCE_FAILED if decided is Exit.FAILED else decided
        status = worse if status is Exit.OK or worse is Exit.REFERENCE_FAILED else status
    if decided_rounds.aiming(cells) and (m.references or m.gates):
        parts.append(until_decided_line(m, cells, frame))
    return (present.terminal(*parts, titles=titles) if parts else ""), status


def until_decided_line(m: Matrix, cells: Sequence[Cell], frame: pd.DataFrame) -> str:
    """What a run that aimed at decisions reached: 'Until decided: 3 of 4 checks decided; 1 undecided at max 20
    repeats: gate ...: about 45 repeats a side would decide.'"""
    aiming = decided_rounds.aiming(cells)
    left, total, decided = decided_rounds.pending(m, aiming, frame)
    stored = frame["cell_key"].value_counts() if len(frame) else pd.Series(dtype=int)
    most = max(c.run.adaptive.max for c in aiming if c.run.adaptive)
    looks = decided_rounds.looks(aiming)
    alpha = decided_rounds.alpha_for(aiming)
    text = (f"Until decided: {decided} of {total} check{'s' if total != 1 else ''} decided (looks at "
            f"{', '.join(map(str, looks))} repeats; each decides at alpha {alpha:.3g}, intervals at "
            f"{(1 - alpha) * 100:.4g}%)")
    if not left:
        return text + "."
    at_max = [p for p in left if all(int(stored.get(k, 0)) >= most for k in p.keys)]
    short = [p for p in left if p not in at_max]

    def items(ps: list[decided_rounds.Pending]) -> str:
        return "; ".join(f"{p.what}: {_would(p)}" for p in ps[:5]) + (" ..." if len(ps) > 5 else "")
    said = [f"{len(at_max)} still undecided at the most repeats ({most}, `max`): {items(at_max)}. Raise `max` (or "
            "--max-repeats) to decide them" if at_max else "",
            f"{len(short)} undecided with fewer repeats than `max` ({items(short)}): run again (`matrix run` adds them)"
            if short else ""]
    return f"{text}; " + "; ".join(x for x in said if x) + "."


def _would(p: decided_rounds.Pending) -> str:
    """What would decide one pending check: the repeats (a side, for a pair), or why no number is known."""
    if not p.needed:
        return p.why
    return f"about {p.needed} repeats {'a side ' if p.what.startswith('gate') else ''}would decide"


def one_threshold(metric: str, min_effect: float | None, specs: Sequence[str]) -> float:
    """The smallest change compare's table calls significant. One output says one threshold: with --fail-on rules on
    the metric compared, their threshold (the smallest, when several), so the table never calls "not significant
    (change < 2%)" the change the gate below it fails at 1%; a --min-effect that says otherwise is refused."""
    rules = gate.parse_rules(specs) if specs else []
    name = an.get_metric(metric).name
    mine = sorted({r.threshold for r in rules if r.metric == name})
    if not mine:
        return an.MIN_EFFECT if min_effect is None else min_effect
    if min_effect is not None and min_effect != mine[0]:
        raise ConfigError(f"--min-effect {min_effect:g} and --fail-on {', '.join(specs)} judge the {name} with two "
                          f"thresholds; give one (the table takes the gate's, {mine[0]:.2%} here)")
    return mine[0]


def gate_result(df: pd.DataFrame, a: str, b: str, specs: Sequence[str], pool: bool = False, here: str = ""
                ) -> tuple[list[gate.Rule], list[gate.GateCheck], list[dict[str, Any]]]:
    """The rules, every check, and B's cells that A has no cell for; each side the repeats runner/analysis/sides.py
    selects for it (one machine's, unless it names machines; `here`: this store's id), as compare takes them."""
    rules = gate.parse_rules(specs)
    side_a, side_b = an.select_side(df, a, pool, here), an.select_side(df, b, pool, here)
    keys = pair_keys(side_a, side_b)  # the pairs compare makes: on the environment too between two machines, or
    # where a side of several environments shares one with the other
    return (rules, gate.evaluate(side_a.frame, side_b.frame, rules, pool=pool, keys=keys,
                                 same_definition=same_definition(side_a, side_b)),
            gate.only_in_b(side_a.frame, side_b.frame, keys))


def gate_text(a: str, b: str, rules: Sequence[gate.Rule], checks: Sequence[gate.GateCheck], fmt: str | None,
              policy: str = "error", unchecked: Sequence[dict[str, Any]] = ()) -> str:
    if fmt == "json":
        return gate.to_json(a, b, rules, checks, policy=policy, unchecked=unchecked)
    lines: list[present.Table | str] = []
    if gate.rows(checks):
        lines.append(present.gate_table(checks))
    if gate.unchecked_line(unchecked):
        lines.append(gate.unchecked_line(unchecked))
    lines.append(gate.summary_line(rules, checks, policy))
    return present.terminal(*lines, titles=["Gate: checks that failed or could not be decided"])


def gate_command(db: Path, a: str, b: str, specs: Sequence[str], fmt: str | None, undecided: str | None = None,
                 pool: bool = False) -> tuple[str, Exit]:
    """`matrix compare A B --fail-on ...`: (the gate's text, exit status: 0 passed, 1 tripped, 5 undecided
    unless `undecided` (--undecided fail|pass) counts undecided checks otherwise)."""
    gate.parse_rules(specs)  # a wrong rule is one line before the store is read
    policy = parse_policy(undecided)
    with Store(db, readonly=True) as store:
        df = an.frame(store.rows(latest_only=False))
        here = store_id(store) or ""
    if df.empty:
        raise StoreError(f"no results in {db}: run `matrix run` first")
    rules, checks, unchecked = gate_result(df, a, b, specs, pool, here)
    verdicts = [c.verdict for c in checks] or [Verdict.UNDECIDED]  # no pair checked: nothing was decided
    status = exit_status(verdicts, policy)
    if fmt == "md":
        from runner.report.fmt import md_table
        table = f"{md_table(present.gate_table(checks))}\n\n" if gate.rows(checks) else ""
        extra = f"{gate.unchecked_line(unchecked)}\n\n" if unchecked else ""
        text = f"## Gate\n\n{table}{extra}**{gate.summary_line(rules, checks, policy)}**\n"
    else:
        text = gate_text(a, b, rules, checks, fmt, policy, unchecked)
    return text, status


def with_gate(compare_text: str, gate_out: str, fmt: str | None) -> str:
    """The compare output with the gate after it; in JSON one document with a `gate` member."""
    if fmt == "json":
        doc = json.loads(compare_text)
        doc["gate"] = json.loads(gate_out)
        return json.dumps(doc, indent=2, allow_nan=False)
    if fmt == "csv":
        return compare_text  # the gate goes to stderr: the CSV stays one table
    return compare_text.rstrip("\n") + "\n\n" + gate_out
