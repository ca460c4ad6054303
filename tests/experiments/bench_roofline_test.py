"""The decode matmul floor's shapes (jaxlab/experiments/bench/roofline.py)."""

from absl.testing import absltest
from absl.testing import parameterized

from jaxlab.experiments.bench import roofline
from jaxlab.models import decoder


class MatmulShapesTest(parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_shapes_hold_every_weight_but_norms_and_input_embedding(self, tied):
    cfg = decoder.DecoderConfig(vocab_size=96, dim=24, mlp_dim=40,
                                num_layers=3, num_heads=6, num_kv_heads=2,
                                head_dim=8, tie_embeddings=tied)
    shapes = roofline.decoder_matmul_shapes(cfg)
    self.assertLen(shapes, 7 * 3 + 1)
    # Per layer q 24x48, k and v 24x16, o 48x24, gate/up 24x40, down 40x24.
    self.assertEqual(shapes[:7], [(24, 48), (24, 16), (24, 16), (48, 24),
                                  (24, 40), (24, 40), (40, 24)])
    self.assertEqual(shapes[-1], (24, 96))
    norms = 3 * 2 * 24 + 24
    embedding = 0 if tied else 96 * 24  # the input table is a gather
    self.assertEqual(sum(a * b for a, b in shapes),
                     cfg.num_params() - norms - embedding)

  def test_floor_reads_the_shapes_bytes(self):
    cfg = decoder.DecoderConfig(vocab_size=64, dim=16, mlp_dim=32,
                                num_layers=2, num_heads=2, num_kv_heads=1)
    out = roofline.measure_decode_matmul_floor(cfg, batch=2, repeats=1)
    self.assertEqual(out["weight_bytes"], 4 * sum(
        a * b for a, b in roofline.decoder_matmul_shapes(cfg)))
    self.assertAlmostEqual(out["bytes_per_s"] * out["seconds"],
                           out["weight_bytes"], delta=1.0)


if __name__ == "__main__":
  absltest.main()
