"""Layer 1: what is benchmarked, framework-neutral: the operators (ops/) and the models (models/),
each with its NumPy reference, sizes and costs, and the declarations of users' own (opbench.api).
It imports only core and no framework."""
