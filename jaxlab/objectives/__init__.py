"""jaxlab.objectives: losses only (rewards live in `jaxlab.rewards`).

rerank, grpo (policy loss + advantage estimators), pmc / unlearning,
self_generated, fim, llada, dpo, classification, controller, stabletoken,
streaming (StreamingThinker), video_lm. Each registers its losses in
`jaxlab.train.losses`.
"""
