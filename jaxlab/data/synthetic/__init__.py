"""jaxlab.synthetic: generators of synthetic data sets (facts, arithmetic)."""
