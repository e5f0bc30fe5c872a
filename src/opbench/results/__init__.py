"""Reading saved runs: it never measures and never starts a process.

- store: files and `.benchmarks` ids in, validated runs out (one ResultsError line for bad data);
- stats, compare: the noise-aware comparison of two sets of runs (`opbench compare`);
- report, scaling, plots, htmlpage: side-by-side tables, the thread and worker scaling, figures;
- summary: the lines a pytest session prints at its end;
- tables: the text formatting all of them share.

What runs benchmarks is below it (the suites, with the harness and the frameworks, driven by the
pytest plugin) and opbench.regression, which runs two environments and judges them.
"""
