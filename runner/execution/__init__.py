"""The run: what to measure and in which order, the run loop that drives backends and the store, what it
tells its listener (the printer is one), adaptive repeats' rounds."""
