"""`--plan`'s calls: the repeats left cut into the calls of a lease as the kit's measure() takes them
(runner/kit/evidence.py), by the same estimates: phases in plan order, each call filled to plans.CALL_MEASURE_S less
plans.CALL_MARGIN_S (the first call's goal rows to the whole CALL_MEASURE_S); an all-or-nothing phase (the GPU tests,
a goal's row, the hand-written loop, GPT-2's first pair) only when all of it fits, any
other until its next repeat does not fit; what does not fit waits for the next call."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from runner.kit import plan as plans
from runner.kit.settings import KitCell

Call = dict[str, tuple[int, float]]        # per phase: repeats and seconds
Deferred = tuple[int, float, str]          # repeats, seconds and why the first call leaves them


def cut(todo: Sequence[tuple[KitCell, int]], cost: Callable[[KitCell, int], float]
        ) -> tuple[list[Call], dict[str, Deferred]]:
    """The repeats cut into calls as measure() takes them, by the same estimates (cost), each call filled to
    plans.CALL_MEASURE_S less plans.CALL_MARGIN_S (the goals' rows in the first call: the whole CALL_MEASURE_S):
    phases in plan order, a phase's repeats round by round; an all-or-nothing phase only when all of it fits, any other until its next repeat does not fit; what does not
    fit waits for the next call (a repeat longer than a call gets one of its own). Returns per call each phase's
    repeats and seconds, and what the first call leaves to a later one, with why."""
    room = plans.CALL_MEASURE_S - plans.CALL_MARGIN_S
    out: list[Call] = []
    deferred: dict[str, Deferred] = {}
    pending = list(todo)
    while pending:
        call: Call = {}
        used, rest = 0.0, []
        waiting: set[str] = set()  # cells with a repeat left to a later call: their later repeats wait too
        for _, grouped in itertools.groupby(pending, key=lambda m: m[0].phase.name):
            group = sorted(grouped, key=lambda m: m[1])  # round by round, as measure() runs them
            costs = [cost(c, r) for c, r in group]
            phase = group[0][0].phase
            # The goals' rows may fill the first call's whole CALL_MEASURE_S: in order of value, the model's error
            # falls on the last of them (measure() does not start what does not fit, and that one opens call 2).
            limit = plans.CALL_MEASURE_S if phase.goal and not out else room
            if phase.all_or_nothing and call and used + sum(costs) > limit:
                rest += group
                waiting.update(c.key for c, _ in group)
                if not out:
                    deferred[phase.name] = (len(group), sum(costs), f"measured whole or not at all (~{sum(costs):.0f} "
                                            f"s), it does not fit the ~{max(limit - used, 0):.0f} s the call has left")
                continue
            for i, ((c, _), secs) in enumerate(zip(group, costs, strict=True)):
                if not phase.all_or_nothing and (c.key in waiting or (call and used + secs > limit)):
                    rest += group[i:]
                    waiting.update(cc.key for cc, _ in group[i:])
                    break
                n, t = call.get(phase.name, (0, 0.0))
                call[phase.name] = (n + 1, t + secs)
                used += secs
        out.append(call)
        pending = rest
    return out, deferred
