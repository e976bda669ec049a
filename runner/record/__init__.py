"""The repeat's record, below the store and standard library only: a stored repeat as a typed record (`stored`), its
admission (`admission`), the metric table (`metrics`) and how each figure is read (`readers`), and where an
imported machine's repeats came from (`provenance`). The store builds these; the statistics and decisions above it
(runner/analysis/) read them."""
