"""Whole models built from `jaxlab.nn`."""
