"""Data: tokenizers, grain pipelines, synthetic task generators."""
