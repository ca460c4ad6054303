"""jaxlab.rewards: reward functions (the losses live in `jaxlab.objectives`).

* `sandbox`: runs untrusted generated code (chart rendering).
* `chart`: MSRL chart-to-code rewards (normalize, fields, judges, reward).
* `thinking`: Trust-GRPO thinking rewards, format checks and scorers.
"""
