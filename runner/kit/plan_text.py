"""`--plan`'s text: the first call row by row, each row with the goal it answers and its cost (and which goal waits for
a later call, and why), then each phase in order with its device minutes and the lease so far, then the later calls
and the whole. It measures nothing."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from runner.kit import plan as plans
from runner.kit.calls import Call, Deferred
from runner.kit.settings import KitCell, KitView

Cutter = Callable[[Sequence[tuple[KitCell, int]]], tuple[list[Call], dict[str, Deferred]]]


def _parts(call: Call) -> str:
    return ", ".join(f"{name} {n} repeat{'s' if n != 1 else ''} (~{secs:.0f} s)" for name, (n, secs) in call.items())


def first_call(kit: KitView, phases: Sequence[plans.Phase], first: Call, left: Sequence[tuple[KitCell, int]]) -> None:
    """call 1's rows: each cell of its phases, its repeats to run and their seconds, and the goal its phase answers."""
    row = 0
    for phase in phases:
        if phase.name not in first:
            continue
        goal = f"; answers: {phase.goal}" if phase.goal else ""
        if not phase.goal:
            n, secs = first[phase.name]
            kit.say(f"call 1 also measures {phase.name} {n} repeats (~{secs:.0f} s): {phase.title}")
            continue
        for c in (c for c in kit.cells if c.phase is phase):
            todo = [r for cc, r in left if cc is c]
            secs = sum(kit.cost(c, r) for r in todo)
            row += 1
            if phase.tests:
                what = f"{phase.title} (~{secs:.0f} s)" if todo else f"{phase.title}: ran already"
            elif phase.reference:
                what = (f"bench beside the hand-written loop on {plans.row_name(c.params)}, {phase.repeats} pairs "
                        f"(~{secs:.0f} s)" if todo else "bench beside the hand-written loop: stored")
            else:
                what = f"{plans.row_name(c.params)} x {len(todo)} of {phase.repeats} repeats (~{secs:.0f} s)"
            kit.say(f"call 1 row {row} {phase.name}: {what}{goal}")
        if phase.note:
            kit.say(f"call 1 row {row} {phase.name} is the model's choice: {phase.note}")


def print_plan(kit: KitView, phases: Sequence[plans.Phase], selected: Sequence[str], cut: Cutter) -> None:
    room = plans.CALL_MEASURE_S
    left = kit.missing()
    packed, deferred = cut([m for m in left if m[0].phase.name in selected])
    reserve = float(kit.args.reserve)
    if packed:
        first = packed[0]
        used = sum(secs for _, secs in first.values())
        kit.say(f"call 1, the goals' call (~{used:.0f} s of its {room:.0f} s by the model; --budget "
                f"{room + reserve:.0f}: {reserve:.0f} s more for the report and the pack), row by row:")
        first_call(kit, phases, first, left)
        kit.say(f"call 1 measures {_parts(first)}: ~{used:.0f} s of its {room:.0f} s (the goals' rows may use the "
                f"whole call, in order of value: the model's error, up to ~{plans.CALL_MARGIN_S:.0f} s, falls on the "
                f"last; other calls are planned to {room - plans.CALL_MARGIN_S:.0f} s)")
        goals = {p.name: p.goal for p in phases if p.goal}
        for name, (n, secs, why) in deferred.items():
            said = f"; it answers: {goals[name]}" if name in goals else ""
            kit.say(f"call 1 leaves {name} ({n} repeat{'s' if n != 1 else ''}, ~{secs:.0f} s) to a later call: "
                    f"{why}{said}")
        fp8 = next((i for i, call in enumerate(packed, 1) if "fp8-by-size" in call), None)
        if fp8 and fp8 > 1:
            kit.say(f"call 1 leaves the goal FP8 at least {plans.GOALS['fp8_over_bf16']}x bf16 at "
                    f"{plans.GOALS['fp8_model']} to fp8-by-size (from call {fp8}: its compiled 1.5B cells alone "
                    "would fill most of a call)")
    total = 0.0
    for i, phase in enumerate(phases, 1):
        todo = [m for m in left if m[0].phase is phase]
        secs = sum(kit.cost(c, r) for c, r in todo)
        total += secs
        calls = max(1, math.ceil(total / room)) if total else 0
        mark = "" if phase.name in selected else " (not selected)"
        repeats = (f"repeat {phase.first_repeat + 1}-{phase.repeats}" if phase.first_repeat
                   else f"{phase.repeats} repeat{'s' if phase.repeats > 1 else ''}")
        kit.say(f"phase {i} {phase.name}{mark}: {len(phase.cells)} cells x {repeats}, {len(todo)} to run, "
                f"~{secs / 60:.1f} device min (so far ~{(total + calls * plans.CALL_START_S) / 60:.0f} min of "
                f"lease in {calls} calls): {phase.title}")
    for i, call in enumerate(packed[1:], 2):
        kit.say(f"call {i} measures {_parts(call)}: ~{sum(s for _, s in call.values()):.0f} s")
    kit.say(f"plan: {len(left)} repeats to run, ~{total / 60:.1f} device min of measuring; in calls of "
            f"{room:.0f} s of measuring and ~{plans.CALL_START_S:.0f} s to start each: {len(packed)} calls, "
            f"~{(total + len(packed) * plans.CALL_START_S) / 60:.0f} min of lease; {kit.budget.text()}")
