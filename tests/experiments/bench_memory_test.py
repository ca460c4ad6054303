"""jaxlab/experiments/bench/memory.py: fsdp=8 holds 1/8 of the state per device.

The numbers come from XLA's compiled memory analysis of the trainer's own
train step (`trainer.make_train_step`) on 8 fake CPU devices.
"""

from absl.testing import absltest
import jax

from jaxlab.experiments.bench import memory

TINY = dict(vocab_size=128, dim=64, num_layers=1, num_heads=4,
            num_kv_heads=2, mlp_dim=128, batch=8, seq_len=16)


class MemoryBenchTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    if jax.device_count() < 8:
      raise absltest.SkipTest("needs 8 devices (XLA_FLAGS="
                              "--xla_force_host_platform_device_count=8)")
    cls.one = memory.analyse(memory.config_for(TINY, fsdp=1),
                             devices=jax.devices()[:1])
    cls.eight = memory.analyse(memory.config_for(TINY, fsdp=8),
                               devices=jax.devices()[:8])

  def test_state_bytes_match_hand_count(self):
    # fp32 params: embed + head 2*V*D, per layer q,o 2*D*D, k,v 2*D*D/2,
    # mlp 3*D*F, two norms 2*D; final norm D. AdamW: mu and nu (2x params)
    # plus int32 step counters.
    v, d, f = 128, 64, 128
    n = 2 * v * d + 2 * d * d + d * d + 3 * d * f + 2 * d + d
    self.assertEqual(self.one["param_bytes_per_device"], 4 * n)
    self.assertBetween(self.one["optimizer_bytes_per_device"] - 8 * n, 0, 64)
    # The donated (aliased) buffers are exactly the state.
    self.assertEqual(self.one["alias_bytes"],
                     self.one["param_plus_optimizer_bytes_per_device"])
    self.assertEqual(self.eight["alias_bytes"],
                     self.eight["param_plus_optimizer_bytes_per_device"])

  def test_fsdp8_holds_one_eighth_per_device(self):
    ratio = self.eight["alias_bytes"] / self.one["alias_bytes"]
    # 1/8 up to the replicated norm scales and step counters.
    self.assertBetween(ratio, 1 / 8, 1 / 8 * 1.03)
    self.assertLess(self.eight["argument_bytes"],
                    self.one["argument_bytes"] / 7.5)


if __name__ == "__main__":
  absltest.main()
