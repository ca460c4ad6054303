"""jaxlab.rewards."""
