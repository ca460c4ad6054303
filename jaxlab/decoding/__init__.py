"""jaxlab.decoding."""
