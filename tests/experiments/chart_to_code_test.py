"""The chart-to-code pieces (the image prefix LM, the `prefix_lm_nll` SFT
loss, sampling, the rollout's prefix hook, the render cache, the chart
grammar) and the experiment's result tables and per-seed resume."""

import json
import os
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.configs import chart_to_code as c2c_configs
from jaxlab.data.synthetic import charts as charts_lib
from jaxlab.experiments import chart_to_code as c2c
from jaxlab.objectives import prefix_lm as prefix_lm_loss
from jaxlab.rewards import chart_eval
from jaxlab.rewards import render_cache
from jaxlab.rewards import sandbox
from jaxlab.rl import learner as learner_lib
from jaxlab.rl import rollout as rollout_lib

BOS, EOS, PAD = charts_lib.BOS, charts_lib.EOS, charts_lib.PAD


def _tiny_config():
  config = c2c_configs.get_config("tiny")
  with config.unlocked():
    config.model.update(dim=32, mlp_dim=64)
    config.vit.update(dim=32, mlp_dim=64)
    config.max_len = 12
  return config


def _images(n, seed=0):
  return np.random.default_rng(seed).uniform(size=(n, 32, 32, 3)).astype(
      np.float32)


# The references below run compiled (one program each), not op by op.
@nnx.jit
def _logits(policy, images, ids):
  return policy.logits(images, ids)


@nnx.jit
def _concat_prefix_logits(policy, images, ids):
  """The decoder on [ViT(images); embed(ids)], the prefix positions cut."""
  prefix = policy.vit(images)
  h = jnp.concatenate([prefix, policy.dec.embed(ids)], axis=1)
  return policy.dec.forward(inputs_embeds=h).logits[:, policy.num_prefix:]


@nnx.jit
def _masked_logits(policy, images, ids, attn):
  return policy.forward(ids, attn, prefix_inputs=images).logits


def _reference_greedy(policy, images, max_len):
  """The former cache-less sampler: a full forward over [prefix; ids] per
  step, argmax of the last real position, PAD after EOS.

  The decoder is causal, so position t's logits depend only on ids[:t + 1]:
  every step runs the same fixed-shape forward (one compile) over the ids
  decoded so far followed by zeros, and reads position t.
  """
  b = images.shape[0]
  ids = np.zeros((b, max_len + 1), np.int32)
  ids[:, 0] = BOS
  done = np.zeros(b, bool)
  logits_fn = jax.jit(policy.logits)
  for t in range(max_len):
    logits = np.asarray(logits_fn(jnp.asarray(images),
                                  jnp.asarray(ids)))[:, t]
    tok = np.where(done, PAD, logits.argmax(-1))
    ids[:, t + 1] = tok
    done |= tok == EOS
  out = []
  for row in ids[:, 1:]:
    row = list(row)
    out.append(row[:row.index(EOS) + 1] if EOS in row else row)
  return out


class PolicyTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.config = _tiny_config()
    self.policy = c2c.make_policy(self.config, seed=0)

  def test_sections_reach_their_classes(self):
    # Without fixed axes the y-range token (last id) is not in the policy.
    self.assertEqual(self.policy.dec.cfg.vocab_size, len(charts_lib.VOCAB))
    self.assertEqual(charts_lib.TOK[charts_lib.YLIM], len(charts_lib.VOCAB) - 1)
    with self.config.unlocked():
      self.config.charts.fixed_axes = False
    self.assertEqual(c2c.make_policy(self.config, 0).dec.cfg.vocab_size,
                     len(charts_lib.VOCAB) - 1)
    self.assertEqual(self.policy.dec.cfg.dim, 32)
    self.assertEqual(self.policy.dec.cfg.num_heads, 2)
    self.assertEqual(self.policy.vit.cfg.out_dim, 32)
    self.assertEqual(self.policy.vit.cfg.patch_size, 8)
    self.assertEqual(self.policy.num_prefix, 16)
    cfg = learner_lib.GRPOConfig(**self.config.grpo)
    self.assertEqual((cfg.group_size, cfg.max_new_tokens, cfg.eos_id),
                     (2, 12, EOS))

  def test_unknown_preset_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "unknown preset 'tinyy'"):
      c2c_configs.get_config("tinyy")

  def test_forward_is_the_concatenated_prefix(self):
    imgs = _images(2)
    ids = jnp.array([[BOS, 3, 9, 12], [BOS, 4, 9, 13]], jnp.int32)
    self.assertEqual(self.policy.num_prefix, 16)
    want = _concat_prefix_logits(self.policy, jnp.asarray(imgs), ids)
    np.testing.assert_allclose(_logits(self.policy, imgs, ids), want,
                               atol=1e-5)
    # A right-padded row gives the same logits on its real tokens.
    attn = jnp.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    got = _masked_logits(self.policy, imgs, ids, attn)
    np.testing.assert_allclose(got[:, :3], want[:, :3], atol=1e-5)

  def test_sampler_with_prefix_equals_cacheless_greedy(self):
    imgs = _images(3, seed=1)
    got = chart_eval.sample_codes(self.policy, imgs,
                                  max_len=self.config.max_len,
                                  temperature=0.0)
    want = _reference_greedy(self.policy, imgs, self.config.max_len)
    self.assertEqual(got, want)

  def test_sft_loss_matches_numpy(self):
    charts = [{"ids": [3, 9, 12, EOS], "image": np.zeros((64, 64, 3),
                                                              np.uint8)},
              {"ids": [4, 9, EOS], "image": np.full((64, 64, 3), 200,
                                                         np.uint8)}]
    batch = charts_lib.sft_arrays(charts, max_len=6)
    loss, m = nnx.jit(prefix_lm_loss.prefix_lm_nll)(self.policy, batch)
    logits = np.asarray(_logits(self.policy, batch["images"], batch["ids"]),
                        np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = []
    for b, c in enumerate(charts):
      seq = [BOS] + c["ids"]
      nll += [-logp[b, t, seq[t + 1]] for t in range(len(seq) - 1)]
    self.assertEqual(float(m["tokens"]), 7.0)
    self.assertAlmostEqual(float(loss), float(np.mean(nll)), places=5)

  def test_rollout_logp_is_the_sampling_distribution(self):
    imgs = _images(2, seed=2)
    tokens = chart_eval.sample_codes(self.policy, imgs, max_len=5,
                                     temperature=1.0, key=jax.random.key(3))
    from jaxlab.decoding import sampler  # pylint: disable=g-import-not-at-top
    ids, attn, comp = sampler.pack_sequences([[BOS]] * 2, tokens,
                                             length=6)
    lp = rollout_lib.teacher_forced_logp(self.policy, ids, attn, comp,
                                         temperature=0.5, prefix_inputs=imgs)
    logits = np.asarray(_logits(self.policy, imgs, jnp.asarray(ids)),
                        np.float64) / 0.5
    logz = np.log(np.exp(logits).sum(-1))
    for b, toks in enumerate(tokens):
      for i, tok in enumerate(toks):
        self.assertAlmostEqual(lp[b, i + 1], logits[b, i, tok] - logz[b, i],
                               places=4)
      self.assertTrue(np.all(lp[b, len(toks) + 1:] == 0.0))
    self.assertTrue(np.all(lp[:, 0] == 0.0))


class GRPOTest(absltest.TestCase):

  def test_learner_update_trains_the_vit_from_rollouts(self):
    config = _tiny_config()
    policy = c2c.make_policy(config, seed=0)
    vit_before = np.asarray(policy.vit.patch_embed_kd[...]).copy()
    learner = c2c.make_learner(config, policy)
    imgs = _images(2, seed=4)      # 2 groups of G=2 (the prefix hook)
    prompts = [[BOS]] * 2
    rb = learner.rollout(prompts, jax.random.key(0), prefix_inputs=imgs)
    np.testing.assert_array_equal(rb.prefix_inputs,
                                  np.repeat(imgs, 2, axis=0))
    self.assertEqual(rb.input_ids_bt.shape, (4, 1 + config.max_len))
    # The old log-probs are the loss's own: the first ratio is exactly 1
    # and the reference (post-SFT copy) equals the policy before any update.
    np.testing.assert_allclose(rb.old_logp_bt, rb.ref_logp_bt, atol=1e-6)
    m = learner.update(rb, np.array([1.0, 0.0, 0.0, 1.0], np.float32),
                       jax.random.key(1))
    self.assertAlmostEqual(m["kl"], 0.0, places=5)
    self.assertGreater(m["grad_norm"], 0.0)
    vit_after = np.asarray(learner.policy.vit.patch_embed_kd[...])
    self.assertGreater(np.abs(vit_after - vit_before).max(), 1e-6)
    # A second rollout from the updated policy no longer matches the ref.
    rb2 = learner.rollout(prompts, jax.random.key(2), prefix_inputs=imgs)
    self.assertGreater(np.abs(rb2.old_logp_bt - rb2.ref_logp_bt).max(), 1e-6)


class RenderCacheTest(absltest.TestCase):

  def test_each_code_rendered_once_timeouts_retried_lru_bound(self):
    calls = []

    def fake_render(code, **kw):
      calls.append((code, kw["timeout_s"]))
      if code == "slow":
        return sandbox.RenderResult(False, None, "timeout after 1s")
      return sandbox.RenderResult(True, np.zeros((2, 2, 3), np.uint8), "")

    render = render_cache.CachedRender(fake_render, max_entries=2)
    first = render("a", timeout_s=1.0, size=(2, 2))
    self.assertIs(render("a", timeout_s=1.0, size=(2, 2)), first)
    render("a", timeout_s=2.0, size=(2, 2))     # other args: a new render
    render("slow", timeout_s=1.0, size=(2, 2))
    render("slow", timeout_s=1.0, size=(2, 2))  # a timeout is not cached
    render("b", timeout_s=1.0, size=(2, 2))     # evicts ("a", 1.0)
    render("a", timeout_s=1.0, size=(2, 2))
    self.assertEqual(calls, [("a", 1.0), ("a", 2.0), ("slow", 1.0),
                             ("slow", 1.0), ("b", 1.0), ("a", 1.0)])
    self.assertEqual((render.hits, render.misses), (1, 6))


def _fake_run(config, seed, cache_dir=None):
  del config, cache_dir
  phase = {"exec_rate": 1.0, "data_f1": 0.1 * seed, "type_acc": 0.5,
           "text_elements": 0.4, "text_reward": 0.6, "visual_ssim": 0.7,
           "example": "plt.bar("}
  return {"phases": {"sft": phase,
                     "text_exec": dict(phase, data_f1=0.1 * seed + 0.05),
                     "text_vis_exec": dict(phase, visual_ssim=0.75)},
          "sft_history": [{"step": 10, "train_loss": 1.0 + seed,
                           "val_loss": 2.0 + seed},
                          {"step": 20, "train_loss": 0.5, "val_loss": 1.5}],
          "rl_logs": {"text_exec": [{"exec": 1.0}],
                      "text_vis_exec": [{"exec": 0.5}]},
          "timing": {}, "elapsed_s": 1.0}


def _bar_top(img: np.ndarray) -> int:
  """Row of the highest bar-blue pixel in a 64x64 rendering's middle bar."""
  col = img[:, 30:34].astype(int)
  blue = (col[..., 2] > 150) & (col[..., 0] < 100)
  return int(np.argmax(blue.any(axis=1)))


class FixedAxesTest(absltest.TestCase):

  def test_code_and_vocab(self):
    toks = charts_lib.chart_code("bar", [3, 5, 2], "cost", fixed_axes=True)
    self.assertEqual("".join(toks), "plt.bar([0,1,2],[3,5,2]);"
                     "plt.ylim(0,10);plt.title('cost')")
    self.assertEqual("".join(charts_lib.chart_code("bar", [3, 5, 2], "cost")),
                     "plt.bar([0,1,2],[3,5,2]);plt.title('cost')")

  def test_a_value_is_a_height_only_with_fixed_axes(self):
    # The middle bar is 5 in both charts; the other values differ.
    def top(others, fixed):
      code = "".join(charts_lib.chart_code("bar", [others, 5, others], "cost",
                                    fixed_axes=fixed))
      return _bar_top(charts_lib.render_trusted(code))
    self.assertEqual(top(1, True), top(9, True))
    # Autoscaled: the 5 reaches the top beside 1s, not beside 9s.
    self.assertLess(top(1, False), top(9, False) - 5)


class SupervisedCacheTest(absltest.TestCase):

  def test_sft_model_saved_reloaded_and_keyed_by_config(self):
    config = _tiny_config()
    with config.unlocked():
      config.sft.update(steps=4, eval_every=2, batch_size=4)
      config.max_len = 28                  # the charts' codes fit
    charts = charts_lib.make_charts(4, 5)
    cache = tempfile.mkdtemp()

    def fake_sft(model, *args, **kwargs):
      """Moves every parameter (so a reload is visible) and logs a curve."""
      del args, kwargs  # the data, and the mesh / rules
      for p in jax.tree.leaves(nnx.state(model, nnx.Param),
                               is_leaf=lambda x: isinstance(x, nnx.Variable)):
        p.set_value(p.get_value() + 0.5)
      return [{"step": 2, "train_loss": 1.5, "val_loss": 2.5}]

    with mock.patch.object(c2c, "sft", side_effect=fake_sft) as sft:
      model, hist = c2c.supervised_policy(config, 0, charts, charts, cache)
      again, hist2 = c2c.supervised_policy(config, 0, charts, charts, cache)
      self.assertEqual(sft.call_count, 1)
      self.assertEqual(hist2, hist)
      fresh = c2c.make_policy(config, 0)
      np.testing.assert_allclose(
          np.asarray(again.dec.embed_vd.get_value()),
          np.asarray(fresh.dec.embed_vd.get_value()) + 0.5)
      pairs = zip(jax.tree.leaves(nnx.state(model, nnx.Param)),
                        jax.tree.leaves(nnx.state(again, nnx.Param)))
      for a, b in pairs:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
      # The RL sections do not enter the key; another SFT budget is
      # another file, trained anew.
      with config.unlocked():
        config.rl.stage1_steps = 99
      c2c.supervised_policy(config, 0, charts, charts, cache)
      self.assertEqual(sft.call_count, 1)
      with config.unlocked():
        config.sft.steps = 2
      c2c.supervised_policy(config, 0, charts, charts, cache)
      self.assertEqual(sft.call_count, 2)
    # Two SFT models, each with its stage key beside it (jaxlab.io.stages).
    self.assertLen([f for f in os.listdir(cache) if f.endswith(".npz")], 2)
    self.assertLen(os.listdir(cache), 4)


class RunTest(absltest.TestCase):

  def test_default_preset_is_the_spec_group_size(self):
    config = c2c_configs.get_config()
    self.assertEqual(config.grpo.group_size, 8)
    self.assertGreaterEqual(len(config.seeds), 3)

  def test_tables_and_per_seed_resume(self):
    config = c2c_configs.get_config("tiny")
    with config.unlocked():
      config.seeds = (0, 2)
    workdir = tempfile.mkdtemp()
    with mock.patch.object(c2c, "run_one", side_effect=_fake_run) as m:
      c2c.run(config, workdir)
      self.assertEqual([a[0][1] for a in m.call_args_list], [0, 2])
      with open(os.path.join(workdir, "results.json")) as f:
        res = json.load(f)
      # A rerun reads the finished seeds back instead of training again.
      flat = c2c.run(config, workdir)
      self.assertEqual(m.call_count, 2)
    self.assertAlmostEqual(flat["text_exec/data_f1"], 0.15)
    tables = {t["id"]: t for t in res["tables"]}
    rows = {r["label"]: r["cells"] for r in tables["phases"]["rows"]}
    self.assertEqual(rows["+ GRPO stage 1 (text + exec)"]["data_f1"],
                     {"seeds": [0, 2], "values": [0.05, 0.25]})
    curve = {r["label"]: r["cells"] for r in tables["sft_curve"]["rows"]}
    self.assertEqual(curve["10"]["val_loss"]["values"], [2.0, 4.0])
    # Every comparison names two rows and a column of the phase table.
    for comp in res["comparisons"]:
      self.assertIn(comp["a"], rows)
      self.assertIn(comp["b"], rows)
      self.assertIn(comp["column"], rows[comp["a"]])
    self.assertIn({"table": "phases", "column": "data_f1",
                   "a": "+ GRPO stage 1 (text + exec)", "b": "SFT",
                   "label": "stage 1 − SFT"}, res["comparisons"])

  def test_a_stage_of_zero_steps_is_not_compared(self):
    config = c2c_configs.get_config("tiny")
    with config.unlocked():
      config.seeds = (1,)

    def stage1_only(config, seed, cache_dir=None):
      r = _fake_run(config, seed, cache_dir)
      del r["phases"]["text_vis_exec"], r["rl_logs"]["text_vis_exec"]
      return r

    workdir = tempfile.mkdtemp()
    with mock.patch.object(c2c, "run_one", side_effect=stage1_only):
      c2c.run(config, workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      res = json.load(f)
    self.assertEqual({c["label"] for c in res["comparisons"]},
                     {"stage 1 − SFT"})


if __name__ == "__main__":
  absltest.main()
