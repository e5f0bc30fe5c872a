"""Reading saved runs: it never measures and never starts a process.

- store: files and `.benchmarks` ids in, validated runs out (one ResultsError line for bad data);
- stats, compare: the noise-aware comparison of two sets of runs (`opbench compare`);
- report, scaling, plots, htmlpage: side-by-side tables, the thread and worker scaling, figures;
- summary: the lines a pytest session prints at its end;
- tables: the text formatting all of them share.

What runs benchmarks is the harness (plugin, measure, execute, e2e over ops, models and backends),
opbench.suites.distributed, and opbench.regression, which runs two environments and judges them.
"""
