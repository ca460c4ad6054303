"""jaxlab.evals."""
