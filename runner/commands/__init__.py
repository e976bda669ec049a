"""One module per command: parse nothing, do the work, return what to print (the CLI wires the options)."""
