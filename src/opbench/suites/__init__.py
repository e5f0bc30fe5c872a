"""Layer 4: one package per suite (ops, models, convergence, distributed, breakdown), each turning its
cases into checked callables, beside what every suite shares: prepared.py (the prepared callable,
the check's errors, the comparison, admission), measure.py (setup, threads, timing, extra_info),
target.py (time to target) and functions.py (users' own code through the `fw` fixture)."""
