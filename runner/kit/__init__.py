"""The GPU evidence kit: one command that, on a machine with an NVIDIA GPU and PyTorch (no Docker), measures
what the GPU issues ask for (ResNet-50 at every precision, the 2018 recipe beside autocast, the hand-written
reference loop, the five write-ups' grids) through `matrix run`'s local backend and writes reports/<gpu>/.

`plan` says what is measured, `calibrate` sizes each cell's window (a probe run in the benchmark's
interpreter), `evidence` runs the plan in rounds within a time budget and resumes from its store,
`tables` writes the evidence page and the write-ups' tables beside their published numbers
(`published.json`). docs/gpu-evidence.md says how to run it.
"""
