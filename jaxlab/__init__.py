"""jaxlab: JAX/Flax NNX reimplementations of ICLR 2026 methods.

One library: shared building blocks (`jaxlab.nn`), models (`jaxlab.models`),
one trainer (`jaxlab.train`), and registries of paper variants
(`jaxlab.objectives`, `jaxlab.rewards`, `jaxlab.decoding`, ...).
"""

__version__ = "0.1.0"
