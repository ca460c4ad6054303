"""Alias: `python -m experiments.report` = `python -m jaxlab.experiments.report`."""

import runpy

if __name__ == "__main__":
  runpy.run_module("jaxlab.experiments.report", run_name="__main__",
                   alter_sys=True)
