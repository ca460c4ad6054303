"""Controller modules (paper I): ops vs NumPy, τ → 0 = discrete, FLOPs."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from jaxlab.models import controller as ctl
from jaxlab.models import decoder as dec
from jaxlab.models import registry
from jaxlab.objectives import controller as ctl_loss


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _entropy(p):
  return -np.sum(p * np.log(p), axis=-1)


DCFG = dec.DecoderConfig(vocab_size=16, dim=32, num_layers=2, num_heads=2,
                         num_kv_heads=1, mlp_dim=64)
CCFG = ctl.ControllerConfig(every_p=1, num_registers=4, register_dim=8,
                            num_flags=3, state_dim=16, control_dim=16,
                            branch_hidden=8, init_std=0.3)
_MODELS = {}


def tiny_model(seed: int = 0) -> ctl.ControlledDecoder:
  """One shared untrained model per seed (construction compiles per shape)."""
  if seed not in _MODELS:
    _MODELS[seed] = ctl.ControlledDecoder(DCFG, CCFG, rngs=nnx.Rngs(seed))
  return _MODELS[seed]


class OpsTest(absltest.TestCase):
  """Each operation's state update against a NumPy reference (spec I.5)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    rng = np.random.default_rng(0)
    cls.R = rng.normal(size=(2, 4, 3)).astype(np.float32)   # [B, N_r, d_r]
    cls.beta = _softmax(rng.normal(size=(2, 4))).astype(np.float32)
    cls.v = rng.normal(size=(2, 3)).astype(np.float32)
    cls.lam = np.array([0.3, 0.9], np.float32)
    cls.rng = rng

  def test_assign(self):
    want = np.empty_like(self.R)
    for b in range(2):
      for j in range(4):
        want[b, j] = self.R[b, j] + self.lam[b] * self.beta[b, j] * (
            self.v[b] - self.R[b, j])
    got = ctl.op_assign(self.R, self.beta, self.v, self.lam)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    # A one-hot address with λ = 1 overwrites exactly that register.
    onehot = np.eye(4, dtype=np.float32)[[2, 0]]
    got = np.asarray(ctl.op_assign(self.R, onehot, self.v, np.ones(2)))
    np.testing.assert_allclose(got[0, 2], self.v[0], rtol=1e-6)
    np.testing.assert_allclose(got[0, [0, 1, 3]], self.R[0, [0, 1, 3]])

  def test_add(self):
    want = self.R + self.beta[..., None] * self.v[:, None, :]
    np.testing.assert_allclose(
        np.asarray(ctl.op_add(self.R, self.beta, self.v)), want, rtol=1e-6)

  def test_read_and_compare(self):
    alpha_a = _softmax(self.rng.normal(size=(2, 4))).astype(np.float32)
    alpha_b = _softmax(self.rng.normal(size=(2, 4))).astype(np.float32)
    w = self.rng.normal(size=(5, 3)).astype(np.float32)
    r_a = np.stack([alpha_a[b] @ self.R[b] for b in range(2)])
    r_b = np.stack([alpha_b[b] @ self.R[b] for b in range(2)])
    np.testing.assert_allclose(np.asarray(ctl.read(self.R, alpha_a)), r_a,
                               rtol=1e-5)
    want = _sigmoid(20.0 * (r_a - r_b) @ w.T)
    got = ctl.op_compare(jnp.asarray(r_a), jnp.asarray(r_b), w, 20.0)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-6)

  def test_branch(self):
    flags = self.rng.uniform(size=(2, 3)).astype(np.float32)
    wg, bg = np.array([1.0, -2.0, 0.5], np.float32), np.float32(0.1)
    gamma = _sigmoid(flags @ wg + bg)
    np.testing.assert_allclose(np.asarray(ctl.branch_gate(flags, wg, bg)),
                               gamma, rtol=1e-6)
    flat = self.rng.normal(size=(2, 6)).astype(np.float32)
    shift = np.array([1.0, -3.0], np.float32)
    psi = lambda x, bid: x * 2.0 + shift[bid]
    want = gamma[:, None] * (flat * 2 + 1) + (1 - gamma[:, None]) * (
        flat * 2 - 3)
    got = ctl.op_branch(flat, jnp.asarray(gamma), psi)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)

  def test_mixture_and_flatten_roundtrip(self):
    cfg = ctl.ControllerConfig(num_registers=4, register_dim=3, num_flags=2,
                               use_memory=True, memory_slots=2, memory_dim=2)
    states = [ctl.ProgramState(
        jnp.asarray(self.rng.normal(size=(2, 4, 3)), jnp.float32),
        jnp.asarray(self.rng.uniform(size=(2, 2)), jnp.float32),
        jnp.asarray(self.rng.normal(size=(2, 2, 2)), jnp.float32))
              for _ in range(5)]
    y = _softmax(self.rng.normal(size=(2, 5))).astype(np.float32)
    mixed = ctl.mix_states(jnp.asarray(y), states)
    want = sum(y[:, o, None, None] * np.asarray(states[o].registers)
               for o in range(5))
    np.testing.assert_allclose(np.asarray(mixed.registers), want, rtol=1e-5)
    flat = ctl.flatten_state(states[0])
    self.assertEqual(flat.shape, (2, cfg.flat_dim))
    back = ctl.unflatten_state(flat, cfg)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(states[0])):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


class ControlledDecoderTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = nnx.clone(tiny_model(0))
    # Trained-looking write-back/injection so the controllers matter.
    for c in cls.model.controllers:
      c.write_sd[...] = 0.3 * jax.random.normal(jax.random.key(1),
                                                c.write_sd.shape)
      c.token_in_sd[...] = 0.3 * jax.random.normal(jax.random.key(2),
                                                   c.token_in_sd.shape)
      c.op_co[...] = 3.0 * jax.random.normal(jax.random.key(3),
                                             c.op_co.shape)
    cls.ids = jnp.array([[1, 5, 3, 7, 2, 9], [4, 4, 0, 11, 8, 6]])

    @jax.jit
    def run(ids, tau):
      outs = {}
      for name, kw in (("hard", dict(selection="hard")),
                       ("cold", dict(selection="soft", tau=tau)),
                       ("knockout", dict(selection="hard", knockout=True))):
        o = cls.model.forward(ids, output_trace=True, output_states=True,
                              **kw)
        outs[name] = (o.logits, [t["op"] for t in o.trace],
                      [t["logits"] for t in o.trace], o.states)
      return outs
    cls.outs = run(cls.ids, 1e-4)

  def test_relaxed_execution_at_zero_temperature_is_the_discrete_trace(self):
    hard, cold = self.outs["hard"], self.outs["cold"]
    for a, b in zip(hard[1], cold[1]):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The opcode margins are far above τ, so the states agree too.
    margins = [np.sort(np.asarray(l), -1) for l in hard[2]]
    self.assertGreater(min(float((m[..., -1] - m[..., -2]).min())
                           for m in margins), 1e-2)
    for sa, sb in zip(hard[3], cold[3]):
      for a, b in zip(jax.tree.leaves(sa), jax.tree.leaves(sb)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4)
    np.testing.assert_allclose(np.asarray(hard[0]), np.asarray(cold[0]),
                               atol=1e-4)
    # The hard ops are not all one op (the test would be vacuous).
    self.assertGreater(len(np.unique(np.concatenate(
        [np.asarray(o).ravel() for o in hard[1]]))), 1)

  def test_knockout_keeps_the_initial_state(self):
    logits, ops, _, states = self.outs["knockout"]
    for o in ops:
      np.testing.assert_array_equal(np.asarray(o), ctl.NOOP)
    s0 = self.model.initial_state(2, 6)
    for s in states:
      np.testing.assert_allclose(np.asarray(s.registers),
                                 np.asarray(s0.registers))
    self.assertGreater(float(jnp.abs(logits - self.outs["hard"][0]).max()),
                       1e-4)

  def test_untrained_model_is_its_decoder(self):
    fresh = tiny_model(0)
    both = jax.jit(lambda ids: (fresh(ids), fresh.decoder(ids)))(self.ids)
    np.testing.assert_allclose(np.asarray(both[0]), np.asarray(both[1]),
                               atol=1e-5)

  def test_p_larger_than_layers_is_one_clear_error(self):
    cfg = ml_collections.ConfigDict(dict(
        name="controller", vocab_size=16, dim=32, num_layers=2, num_heads=2,
        num_kv_heads=1, mlp_dim=64, controller=dict(every_p=3)))
    with self.assertRaisesRegex(ValueError,
                                r"every_p=3 is larger than model.num_layers"
                                r"=2"):
      registry.get_spec(cfg)
    cfg.controller.every_p = 2
    spec = registry.get_spec(cfg)
    self.assertEqual(nnx.eval_shape(spec.factory).layer_ids, (1,))
    with self.assertRaisesRegex(ValueError, "model.controller.bogus"):
      ctl.controller_config({"bogus": 1})

  def test_flop_counter_hand_case(self):
    d = dec.DecoderConfig(vocab_size=10, dim=4, num_layers=2, num_heads=1,
                          num_kv_heads=1, mlp_dim=8)
    c = ctl.ControllerConfig(every_p=2, num_registers=2, register_dim=3,
                             num_flags=1, state_dim=5, control_dim=6,
                             branch_hidden=2)
    # flat = 2*3 + 1 = 7. MACs: psi 7*5 + token_in 5*4 + phi 4*6 + selector
    # 6*5 + addresses 3*6*2 + value 6*3 + 3*3 + lambda 6 + reads 2*2*3 +
    # compare 1*3 + gamma 1 + Psi 2*((7+2)*2 + 2*7) + rho 7*5 + W_s 5*4.
    macs = (35 + 20 + 24 + 30 + 36 + 18 + 9 + 6 + 12 + 3 + 1 + 64 + 35 + 20)
    self.assertEqual(ctl.controller_forward_flops(4, c), 2 * macs)
    # Decoder forward per token at T = 3: 2 * (params - input embedding)
    # + 4 L T H hd. Block: attn 4*4*(2+2) = 64, mlp 3*4*8 = 96, norms 8.
    n = 2 * (64 + 96 + 8) + 4 + 10 * 4          # + final norm + lm head
    self.assertEqual(ctl.decoder_forward_flops(d, 3),
                     2 * n + 4 * 2 * 3 * 1 * 4)
    self.assertAlmostEqual(ctl.flop_overhead(d, c, 3),
                           2 * macs / (2 * n + 96))
    self.assertAlmostEqual(ctl.paper_overhead(2, 5, 4), (5 / 4) ** 2 / 4)


class LossTest(absltest.TestCase):

  def test_loss_terms_and_trace_alignment(self):
    model = tiny_model(0)
    ids = jnp.array([[1, 5, 3, 7], [4, 4, 0, 11]])
    batch = {"inputs": ids, "targets": jnp.roll(ids, -1, 1),
             "loss_mask": jnp.array([[0, 0, 1, 1], [0, 1, 1, 0]], jnp.float32),
             "op_targets": jnp.array([[0, 1, 1, -1], [0, 2, 3, 4]])}
    cfg = ml_collections.ConfigDict(dict(op_weight=0.0, sem_weight=0.0,
                                         ent_weight_start=0.0,
                                         ent_weight_end=0.0, ent_steps=10,
                                         spar_weight=0.0))

    @jax.jit
    def run(b):
      loss, m = ctl_loss.controller_loss(model, b, rng=jax.random.key(0),
                                         config=cfg, step=0)
      out = model.forward(b["inputs"], step=0, rng=jax.random.key(0),
                          output_trace=True)
      return loss, m, out
    loss, m, out = run(batch)
    logp = np.asarray(jax.nn.log_softmax(out.logits))
    tg, mk = np.asarray(batch["targets"]), np.asarray(batch["loss_mask"])
    want = -sum(logp[b, t, tg[b, t]] for b in range(2) for t in range(4)
                if mk[b, t]) / mk.sum()
    self.assertAlmostEqual(float(loss), want, places=5)
    tgt = np.asarray(batch["op_targets"])
    hits = sum(((np.asarray(tr["op"]) == tgt) & (tgt >= 0)).sum()
               for tr in out.trace)
    self.assertAlmostEqual(float(m["op_acc"]), hits / (2 * 7), places=6)


# Every auxiliary weight 0; each AuxiliaryLossTest case turns one on.
_ZERO_WEIGHTS = dict(op_weight=0.0, sem_weight=0.0, ent_weight_start=0.0,
                     ent_weight_end=0.0, ent_steps=10, spar_weight=0.0)
_TERM_CONFIGS = {
    "op_y": dict(op_weight=0.7, op_loss_on="y"),
    "op_pi": dict(op_weight=0.7, op_loss_on="pi"),
    "sem": dict(sem_weight=0.3),
    # λ_ent(4) = 0.2 + (4 / 10) (1.0 - 0.2) = 0.52.
    "ent": dict(ent_weight_start=0.2, ent_weight_end=1.0),
    "spar": dict(spar_weight=0.4),
}
_STEP = 4


class AuxiliaryLossTest(parameterized.TestCase):
  """L_op, L_sem, L_ent and L_spar (spec I.6) against NumPy, each alone.

  The references are computed from the forward pass's selections y, logits
  π, write addresses β and program states (not from the loss's own trace
  summaries), averaged over the positions with an opcode target and over
  the two controllers.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    model = tiny_model(0)
    ids = jnp.array([[1, 5, 3, 7, 2], [4, 4, 0, 11, 8]])
    cls.batch = {
        "inputs": ids, "targets": jnp.roll(ids, -1, 1),
        "loss_mask": jnp.array([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]],
                               jnp.float32),
        "op_targets": jnp.array([[0, 1, 2, -1, 4], [-1, 3, 3, 1, 0]])}
    configs = {name: ml_collections.ConfigDict({**_ZERO_WEIGHTS, **kw})
               for name, kw in {"task": {}, **_TERM_CONFIGS}.items()}

    @jax.jit
    def run(b):
      key = jax.random.key(0)
      losses = {name: ctl_loss.controller_loss(model, b, rng=key, config=c,
                                               step=_STEP)
                for name, c in configs.items()}
      out = model.forward(b["inputs"], step=_STEP, rng=key,
                          output_trace=True, output_states=True)
      return losses, out, model.initial_state(*b["inputs"].shape)
    cls.losses, out, s0 = jax.device_get(run(cls.batch))
    cls.trace = out.trace
    cls.states = (s0,) + tuple(out.states)
    cls.valid = np.asarray(cls.batch["op_targets"]) >= 0
    assert len(cls.trace) == 2  # every_p = 1 on 2 layers

  def _average(self, per_controller):
    """Mean over controllers of the mean over positions with a target."""
    return np.mean([x[self.valid].mean() for x in per_controller])

  def _aux(self, name):
    """The loss with only `name`'s weight on, minus the bare task loss."""
    return float(self.losses[name][0]) - float(self.losses["task"][0])

  @parameterized.parameters("y", "pi")
  def test_op_loss_is_the_cross_entropy_against_the_opcode(self, op_on):
    tgt = np.maximum(np.asarray(self.batch["op_targets"]), 0)[..., None]
    if op_on == "y":  # the relaxed Gumbel sample that mixed the states
      dists = [np.asarray(tr["y"], np.float64) for tr in self.trace]
    else:
      dists = [_softmax(np.asarray(tr["logits"], np.float64))
               for tr in self.trace]
    want = self._average([-np.log(np.take_along_axis(p, tgt, -1)[..., 0])
                          for p in dists])
    self.assertAlmostEqual(self._aux(f"op_{op_on}"), 0.7 * want, places=5)
    metrics = self.losses[f"op_{op_on}"][1]
    self.assertAlmostEqual(float(metrics["op_loss"]), want, places=5)
    # Noise makes y differ from softmax(π), so the switch matters.
    other = self.losses["op_pi" if op_on == "y" else "op_y"][1]["op_loss"]
    self.assertGreater(abs(float(other) - want), 1e-2)

  def test_sem_is_register_change_on_the_register_keeping_ops(self):
    per = []
    for k, tr in enumerate(self.trace):
      y = np.asarray(tr["y"], np.float64)
      change = np.sum(np.square(
          np.asarray(self.states[k + 1].registers, np.float64)
          - np.asarray(self.states[k].registers, np.float64)), axis=(-2, -1))
      per.append((y[..., ctl.COMPARE] + y[..., ctl.NOOP]) * change)
    want = self._average(per)
    self.assertGreater(want, 1e-3)
    self.assertAlmostEqual(self._aux("sem"), 0.3 * want, places=5)
    self.assertAlmostEqual(float(self.losses["sem"][1]["sem"]), want,
                           places=5)

  def test_ent_is_the_entropy_of_y_with_the_annealed_weight(self):
    want = self._average([_entropy(np.asarray(tr["y"], np.float64))
                          for tr in self.trace])
    self.assertAlmostEqual(self._aux("ent"), 0.52 * want, places=5)
    self.assertAlmostEqual(float(self.losses["ent"][1]["entropy"]), want,
                           places=5)

  def test_spar_is_write_address_entropy_plus_state_change(self):
    def flat(state):
      regs = np.asarray(state.registers, np.float64)
      return np.concatenate([regs.reshape(regs.shape[:2] + (-1,)),
                             np.asarray(state.flags, np.float64)], -1)
    per = []
    for k, tr in enumerate(self.trace):
      delta_sq = np.sum(np.square(flat(self.states[k + 1])
                                  - flat(self.states[k])), -1)
      per.append(_entropy(np.asarray(tr["beta"], np.float64)) + delta_sq)
    want = self._average(per)
    self.assertAlmostEqual(self._aux("spar"), 0.4 * want, places=5)
    self.assertAlmostEqual(float(self.losses["spar"][1]["spar"]), want,
                           places=5)

  def test_unknown_op_loss_target_is_one_error(self):
    cfg = ml_collections.ConfigDict({**_ZERO_WEIGHTS, "op_loss_on": "probs"})
    with self.assertRaisesRegex(ValueError, "loss.op_loss_on must be one of"):
      jax.eval_shape(lambda b: ctl_loss.controller_loss(
          tiny_model(0), b, rng=jax.random.key(0), config=cfg), self.batch)


if __name__ == "__main__":
  absltest.main()
