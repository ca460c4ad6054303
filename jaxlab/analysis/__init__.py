"""Analysis tools: probes of trained models.

Modules (import them directly; this package imports nothing eagerly):
  frequency_entropy: post-RoPE q/k capture, SpectrumFE / SequenceFE, FE
    heatmaps, pair selection and weighted-RoPE attenuation (paper C).
  sipit: recovering a prompt from its hidden states (SipIt, paper Q).
  injectivity: chunked pairwise distances of last-token states, the
    exhaustive continuation test and the negative controls (paper Q).
  qtn: the quantum-tensor-network per-sample uncertainty score and the
    entropy-maximising reweighting (paper J).
"""
