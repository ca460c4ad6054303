"""jaxlab.rl."""
