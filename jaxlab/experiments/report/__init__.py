r"""Docs tables from committed results: `python -m jaxlab.experiments.report`.

Every results table in README.md and docs/papers/*.md sits between markers

    <!-- report: NAME/TABLE_ID [columns=k1,k2,...] [rows="A;B;..."] -->
    ...generated; do not edit...
    <!-- /report -->

where NAME is `docs/results/NAME.json` (a run's `results.json`, schema of
`jaxlab/experiments/results.py`) and TABLE_ID one of its tables; `columns=` picks
columns by key and `rows=` (`;`-separated) picks rows by label, each in the
order given. The block holds a caption (what the numbers are, n, the seeds,
the source file), the table with every cell as mean ± sample standard
deviation (ddof 1) over seeds, and, for each comparison declared on the
shown rows and columns, the paired difference (a − b, same seeds) with its
95 % t-interval (scipy.stats.t, n − 1 degrees of freedom). A degenerate
comparison shows its difference and, in place of the interval, why it has
none: "n = 2: no interval" (fewer than 3 common seeds) or "identical in
every seed" (the differences do not vary, so the interval has zero width).

    python -m jaxlab.experiments.report                 # rewrite every marked table
    python -m jaxlab.experiments.report --check         # exit 1 if a doc is stale
    python -m jaxlab.experiments.report --add NAME WORKDIR [WORKDIR ...]
    python -m jaxlab.experiments.report --verify NAME [--threshold 3]
    python -m jaxlab.experiments.report --workdir=DIR     # one run's tables

`--add` copies WORKDIR/results.json to docs/results/NAME.json; several
workdirs (e.g. one run per seed) are merged: cells concatenate their seeds,
`commands` lists every run's command; a preempted run (`"preempted": true`)
is refused. `--workdir` prints one run's tables (a local directory or a
gs:// URL) the way the docs render them, without writing anything.
`--verify` reruns the committed command(s) into a temporary workdir (same
config: the command carries the config name, preset and overrides; the
old `--config=configs/X.py` form is replayed as `--config=X`) and prints every cell's shift from the
committed value in standard errors,

    shift = (mean_new − mean_old) / sqrt(s_old² / n_old + s_new² / n_new),

with s the sample std (0 for n < 2) and the denominator floored at half the
cell's displayed resolution (0.5 · 10^-decimals / scale), so cells with no
spread (constants, or values identical over seeds) count as moved only when
the change shows in the printed table. It exits 1 when any |shift| > 3 or a
committed cell is missing from the rerun.

The parts, one job each: `stats` (values, paired differences and their
intervals, a rerun's shift), `render` (cells, tables, docs, one run's
tables), `paper_map` (the README's map from the papers' front matter) and
`cli` (the command line: `--add`, `--verify`, `--check`, `--workdir`). The
names below are the package's public API.
"""

import subprocess  # pylint: disable=unused-import  (`report.subprocess`: tests patch its `run`)

from jaxlab.experiments.report._base import DOCS, REPO, RESULTS_DIR, ReportError  # pylint: disable=g-multiple-import
from jaxlab.experiments.report.cli import add, compare, main, merge, print_shifts, rerun_command, verify  # pylint: disable=g-multiple-import
from jaxlab.experiments.report.paper_map import PAPER_FIELDS, PAPER_MAP, STATUSES, paper_docs, parse_front_matter, render_paper_map  # pylint: disable=g-multiple-import
from jaxlab.experiments.report.render import doc_paths, find_table, fmt_cell, fmt_interval, fmt_num, load_results, parse_options, read_run, render_doc, render_table, render_workdir, update_docs  # pylint: disable=g-multiple-import
from jaxlab.experiments.report.stats import MIN_INTERVAL_SEEDS, PairedStat, Shift, cell_shift, degenerate_reason, mean_std, paired_differences, paired_interval, values  # pylint: disable=g-multiple-import

__all__ = [
    "DOCS", "REPO", "RESULTS_DIR", "ReportError", "add", "compare", "main",
    "merge", "print_shifts", "rerun_command", "verify", "PAPER_FIELDS",
    "PAPER_MAP", "STATUSES", "paper_docs", "parse_front_matter",
    "render_paper_map", "doc_paths", "find_table", "fmt_cell", "fmt_interval",
    "fmt_num", "load_results", "parse_options", "read_run", "render_doc",
    "render_table", "render_workdir", "update_docs", "MIN_INTERVAL_SEEDS",
    "PairedStat", "Shift", "cell_shift", "degenerate_reason", "mean_std",
    "paired_differences", "paired_interval", "values",
]
