"""Analysis tools: probes of trained models.

Modules (import them directly; this package imports nothing eagerly):
  frequency_entropy: post-RoPE q/k capture, SpectrumFE / SequenceFE, FE
    heatmaps, pair selection and weighted-RoPE attenuation (paper C).
"""
