"""The generic training loop and its pieces (optimizer, checkpoints, metrics)."""
