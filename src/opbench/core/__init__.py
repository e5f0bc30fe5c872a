"""Layer 0: the types everything else is written in (the Case, inputs, layouts, one-line errors,
files, the result schema, worker processes). It imports nothing of opbench above it and no
framework (docs/contributing/layout.md)."""
