"""Benchmarks that print one JSON object: `python -m experiments.bench NAME`.

    python -m experiments.bench decode   # prefill/decode tokens/s vs torch
    python -m experiments.bench train    # train-step throughput
"""
