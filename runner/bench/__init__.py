"""matrix's benchmark: train a model for a measured window and print one MATRIX_RESULT line.

This package runs inside every environment, under whatever Python and PyTorch live there, from
Python 3.6 / PyTorch 1.0 (2018 images) to today: standard library + torch, with torchvision, numpy,
apex and pynvml used only when present, and no syntax newer than 3.6. It travels as one zipapp
(runner/backends/artifact.py builds it: `python bench-<hash>.pyz ARGS`). The command line and the result line
are the contract in docs/internals.md; contract.py holds its names and rules as literal data.
"""
