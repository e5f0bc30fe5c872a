"""The upgrade gate: everything that runs other environments and decides regressions from what
they measure.

- envs: a virtual environment per side, layered on this one, with the named requirements on top;
- paired (the default design): two live workers (worker, speaking the processes protocol) per
  pair, interleaved trials (coordinator), a two-stage test over worker pairs (intervals), saved
  and compared like stored runs (decisions);
- process: K whole pytest runs per side in ABBA order, compared by opbench.results.compare.

The command line (opbench.cli) parses arguments and calls into here; opbench.results reads what
is saved and runs nothing.
"""
