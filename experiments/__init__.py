"""Aliases for a source checkout: the experiments live in `jaxlab.experiments`.

`python -m experiments.main`, `python -m experiments.report` and
`python -m experiments.compile` run `jaxlab.main`, `jaxlab.experiments.report`
and `jaxlab.experiments.compile`. Nothing else is here: import from
`jaxlab.experiments` (this package is not installed with the wheel).
"""
