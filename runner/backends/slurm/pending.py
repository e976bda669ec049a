"""Why a job pends, and whether waiting can help.

squeue reports a reason code for every pending job (squeue(1), "JOB REASON CODES"). Most clear
by themselves: Priority and Resources (other jobs first), BeginTime, Dependency, the many
...Limit codes of associations and QOS (running jobs end), Reservation. The codes below do not:
the job would wait until someone changes the cluster or the job, and `matrix run` would wait with
it. matrix says the reason as soon as it sees one, and when a code that does not clear has lasted
`blocked_after` seconds (an environment field, default 60), it cancels the job with scancel and
stores its tasks as `not_started` with the reason: nothing was measured, so the next run tries
them again once the cluster is fixed.
"""

from __future__ import annotations

from runner.backends.slurm.commands import PendingTask

NEVER_CLEARS: dict[str, str] = {
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive (it takes no jobs)",
    "JobHeldUser": "the job is held by its user (scontrol release)",
    "JobHeldAdmin": "the job is held by an administrator",
    "BadConstraints": "no node has the features the job asks for (--constraint)",
    "PartitionNodeLimit": "the job asks for more nodes than the partition allows",
    "PartitionTimeLimit": "the job's time limit is longer than the partition allows",
    "PartitionConfig": "the job asks for more than the partition is configured for",
    "InvalidAccount": "the account is invalid",
    "InvalidQOS": "the QOS is invalid",
    "AccountNotAllowed": "the account may not use this partition",
    "QOSNotAllowed": "the QOS may not use this partition",
    "DependencyNeverSatisfied": "a job it depends on failed",
    "FrontEndDown": "no front end node is available",
}
# ReqNodeNotAvail: the nodes the job needs are down, drained or reserved. It clears when a node of
# the partition can still free up (it is busy, not broken); it does not when none of them can run jobs.
NODES_UNAVAILABLE = "ReqNodeNotAvail"
USABLE_NODE_STATES = frozenset({"idle", "mix", "mixed", "alloc", "allocated", "comp", "completing",
                                "plnd", "planned"})


def blocked(p: PendingTask, node_states: dict[str, str] | None) -> str | None:
    """Why this pending task can never start as things are, or None when waiting can help.
    `node_states` are the states of the nodes of its partition (None: unknown, so wait)."""
    if p.reason in NEVER_CLEARS:
        return f"{p.reason}: {NEVER_CLEARS[p.reason]}"
    if p.reason == NODES_UNAVAILABLE and node_states is not None:
        if not any(state in USABLE_NODE_STATES for state in node_states.values()):
            shown = ", ".join(f"{n} {s}" for n, s in sorted(node_states.items())[:8]) or "no nodes"
            return (f"{p.reason}: no node of partition {p.partition or '(default)'} can run jobs "
                    f"({shown}){' ' + p.detail if p.detail else ''}")
    return None


def describe(p: PendingTask) -> str:
    """The reason as a person reads it."""
    return p.reason + (f" ({p.detail})" if p.detail else "")
