"""Model compression (import the modules directly).

  vulcan: class-specific ViT pruning (paper O): neuron scores, k-means
    collapse with exact merge, SVD head pruning, budgets, baselines.
  lestd: sparse Tucker decomposition of attention (paper P): HOOI, core
    sparsification, budget solver, `TuckerAttention`, SVD baseline.
  linalg: shared linear algebra (effective rank, batched SVD, k-means).
"""
