"""What a matrix file says and what a repeat is: cells and their keys, run settings, the benchmark's contract
as the controller reads it, outcomes, strict YAML. Imports only runner.base."""
