"""HF checkpoints with `rope_scaling` match transformers beyond L_original."""

import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
from flax import nnx

from jaxlab.io import hf as hf_io
from jaxlab.testing import hf_fixtures

ORIGINAL = 32  # pre-training context of the tiny checkpoints
LENGTH = 112  # evaluated length: 3.5x the original maximum


def _run(model, ids):
  """Jitted logits (the eager forward is slow on a shared CPU)."""
  graphdef, state = nnx.split(model)
  fn = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))
  return np.asarray(fn(state, np.asarray(ids)))


class HfRopeScalingTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("linear", {"rope_type": "linear", "factor": 4.0}, ORIGINAL, "v5"),
      ("dynamic", {"rope_type": "dynamic", "factor": 2.0}, ORIGINAL, "v5"),
      ("yarn", {"rope_type": "yarn", "factor": 4.0,
                "original_max_position_embeddings": ORIGINAL}, 4 * ORIGINAL,
       "v5"),
      ("yarn_options_v4", {"rope_type": "yarn", "factor": 4.0,
                           "original_max_position_embeddings": ORIGINAL,
                           "beta_fast": 8.0, "beta_slow": 0.5,
                           "mscale": 1.0, "mscale_all_dim": 0.5,
                           "truncate": False}, 4 * ORIGINAL, "v4"),
      ("llama3", {"rope_type": "llama3", "factor": 4.0,
                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": ORIGINAL},
       4 * ORIGINAL, "v5"))
  def test_logits_match_transformers(self, rope_scaling, max_pos, dialect):
    with tempfile.TemporaryDirectory() as d:
      path, hf_model = hf_fixtures.make_hf_checkpoint(
          d, "llama", hidden_size=32, num_heads=2, num_kv_heads=1,
          head_dim=32, rope_scaling=rope_scaling,
          max_position_embeddings=max_pos, config_dialect=dialect,
          return_model=True)
      model, cfg = hf_io.load(path)
    method = hf_io.HF_ROPE_TYPES[rope_scaling["rope_type"]]
    self.assertEqual(cfg.rope_scaling["method"], method)
    ids = np.random.default_rng(0).integers(0, 97, (2, LENGTH))
    want = hf_fixtures.hf_logits(hf_model, ids)
    got = _run(model, ids)
    np.testing.assert_allclose(got, want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())
    # The scaling matters at this length: plain RoPE gives other logits.
    plain = nnx.merge(*nnx.split(model))
    plain.cfg = cfg.replace(rope_scaling=None)
    self.assertGreater(np.abs(_run(plain, ids) - want).max(),
                       1e-2 * np.abs(want).max())
    # Within the original length dynamic NTK is plain RoPE, as in HF (whose
    # cached long frequencies reset only below the original length).
    if method == "dynamic_ntk":
      short = ids[:, :ORIGINAL - 1]
      np.testing.assert_allclose(_run(model, short),
                                 hf_fixtures.hf_logits(hf_model, short),
                                 rtol=1e-4, atol=1e-4 * np.abs(want).max())


if __name__ == "__main__":
  absltest.main()
