"""Data-parallel training on the frameworks' own distributed engines: the engine catalogue, the
cases, the worker group the pytest process coordinates, the workers, and the equivalence check."""
