"""Alias of the launcher: `python -m experiments.main` = `python -m jaxlab.main`."""

from jaxlab import main as _main

if __name__ == "__main__":
  _main._entry()  # pylint: disable=protected-access
