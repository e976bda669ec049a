"""The GPU evidence kit: one command that, on a machine with an NVIDIA GPU and PyTorch (no Docker), measures
what the GPU issues ask for (ResNet-50's plain eager recipe beside its fastest honest settings, the hand-written
reference loop, the 2018 recipe, the five write-ups' grids) through `matrix run`'s local backend and writes
reports/<device>/.

`plan` says what is measured and in which order, and estimates a repeat's device seconds; `evidence` runs the
plan within a time budget and resumes from its store; `device` binds a state to one device; `reference` runs the
hand-written loop beside bench; `output` packs the state and writes the report; `evidence_page` and `headline` write
the evidence page and the write-ups' tables beside their published numbers (`published.json`).
docs/gpu-evidence.md says how to run it.
"""
