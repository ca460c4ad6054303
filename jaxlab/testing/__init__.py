"""Shared test fixtures (test-only helpers; modules import torch lazily)."""
