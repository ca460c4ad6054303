"""jaxlab.objectives."""
