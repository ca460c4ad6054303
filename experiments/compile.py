"""Alias: `python -m experiments.compile` = `python -m jaxlab.experiments.compile`."""

import runpy

if __name__ == "__main__":
  runpy.run_module("jaxlab.experiments.compile", run_name="__main__",
                   alter_sys=True)
