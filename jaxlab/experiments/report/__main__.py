"""`python -m jaxlab.experiments.report`: see the package docstring."""

import sys

from jaxlab.experiments.report import cli

if __name__ == "__main__":
  sys.exit(cli.main())
