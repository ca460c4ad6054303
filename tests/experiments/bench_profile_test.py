"""jaxlab/experiments/bench/profile.py charges each HLO op to the model part that
made it (from the HLO's own Python stack metadata)."""

import collections

from absl.testing import absltest
import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.experiments.bench import profile
from jaxlab.models import decoder


class ProfileAttributionTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cfg = decoder.DecoderConfig(vocab_size=64, dim=32, num_layers=1,
                                num_heads=4, num_kv_heads=2, mlp_dim=48)
    model = decoder.Decoder(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    ids = jnp.ones((2, 8), jnp.int32)

    def loss(p):
      return jnp.mean(nnx.merge(graphdef, p)(ids) ** 2)

    text = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
    cls.ops = profile.parse_hlo(text)

  def test_matmuls_are_charged_to_their_layer(self):
    dots = collections.Counter(
        (profile.categorize(i), profile.phase(i)) for i in self.ops.values()
        if i["inner_op"] == "dot")
    parts = {part for part, _ in dots}
    # q/k/v, output projection, the MLP's three matmuls and the LM head,
    # forward and backward; none left unattributed.
    for part in ("lm_head", "mlp", "attention_qkv_proj",
                 "attention_out_proj"):
      self.assertIn(part, parts)
      self.assertIn((part, "forward"), dots)
      self.assertIn((part, "backward"), dots)
    self.assertNotIn("other", parts)

  def test_fusion_takes_its_dot_metadata(self):
    # A fusion whose body holds a dot is charged by the dot, not by the
    # elementwise op at its root.
    fused = [i for i in self.ops.values()
             if i["op"] == "fusion" and i["inner_op"] == "dot"]
    self.assertNotEmpty(fused)
    self.assertTrue(all(i["stack"] for i in fused))

  def test_summary_keeps_the_shares(self):
    prof = {"by_part": {"mlp": 0.6, "lm_head": 0.4}, "by_phase": {},
            "by_op_kind": {"dot": 0.999, "add": 0.001}, "by_module": {},
            "total_op_ms": 3.0, "loadavg": [1.0],
            "top_ops": [{"op": str(i)} for i in range(9)]}
    out = profile.summary(prof)
    self.assertEqual(out["by_part"], {"mlp": 0.6, "lm_head": 0.4})
    self.assertEqual(out["by_op_kind"], {"dot": 0.999})
    self.assertLen(out["top_ops"], 5)
    self.assertEqual(profile.summary({"error": "x"}), {"error": "x"})


if __name__ == "__main__":
  absltest.main()
