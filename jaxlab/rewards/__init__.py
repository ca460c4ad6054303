"""jaxlab.rewards: reward functions (the losses live in `jaxlab.objectives`).

* `sandbox`: runs untrusted generated code (chart rendering) unprivileged,
  offline and limited; `SandboxPool` keeps warm workers (`sandbox_worker`).
* `answer`: verifiable-answer rewards.
* `chart`: MSRL chart-to-code rewards (normalize, fields, judges, reward).
* `thinking`: Trust-GRPO thinking rewards, format checks and scorers.
"""
