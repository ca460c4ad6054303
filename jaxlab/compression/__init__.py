"""jaxlab.compression."""
