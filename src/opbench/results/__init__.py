"""The results side of opbench: storing and reading runs (store), their statistics, comparisons
and reports (stats, compare, report, plots, htmlpage, summary), and the regression gates built
on them (upgrade: process-level runs; pairs, paired_stats, paired_results, workers and worker:
the paired interleaved gate). The harness that runs and checks benchmarks is the rest of the
package: plugin, measure, execute, e2e, and the ops, backends and models catalogues."""
