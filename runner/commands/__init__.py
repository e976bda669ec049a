"""The commands that decide: each module parses nothing (runner/cli.py wires the options), runs one command over
the store and returns its text and exit status. `decide`: `matrix check`, the gate of `compare --fail-on` and the
decisions printed at the end of `matrix run`; `bisect`: `matrix bisect`."""
