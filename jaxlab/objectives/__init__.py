"""jaxlab.objectives: losses only (rewards live in `jaxlab.rewards`).

rerank, grpo (policy loss + advantage estimators), pmc / unlearning,
self_generated, fim.
"""
