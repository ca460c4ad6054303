"""Llama 4's NoPE layer pattern read from a config.json.

The reference is transformers' own `Llama4TextConfig` / `Llama4Config`
(installed, nothing downloads): its `no_rope_layers` after `__post_init__`
(1 = RoPE, 0 = NoPE per layer; when absent, a NoPE layer every
`no_rope_layer_interval` layers) must equal jaxlab's reading of the same
config dict, whether the dict spells the list out or leaves it to the
interval.
"""

from absl.testing import absltest
import transformers

from jaxlab.io.hf import config as hf_config


def _ref(cfg) -> tuple[int, ...]:
  """NoPE layers as transformers' Llama4TextAttention sees them."""
  return tuple(i for i in range(cfg.num_hidden_layers)
               if not cfg.no_rope_layers[i])


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
         "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "rope_theta": 10000.0}


class NopeLayersTest(absltest.TestCase):

  def test_matches_transformers_llama4_text_config(self):
    Llama4TextConfig = transformers.Llama4TextConfig  # pylint: disable=invalid-name
    for kw in ({"num_hidden_layers": 8},
               {"num_hidden_layers": 7, "no_rope_layer_interval": 3},
               {"num_hidden_layers": 6,
                "no_rope_layers": [1, 0, 1, 1, 0, 1]}):
      ref = Llama4TextConfig(**kw)
      # The config as transformers writes it (the list spelled out) and as
      # a hand-written dict that leaves it to the interval.
      self.assertEqual(hf_config.nope_layers_from_hf(ref.to_dict()),
                       _ref(ref), kw)
      self.assertEqual(hf_config.nope_layers_from_hf(
          {"model_type": "llama4_text", **kw}), _ref(ref), kw)
    self.assertEqual(_ref(Llama4TextConfig(num_hidden_layers=8)), (3, 7))

  def test_llama4_nested_text_config(self):
    ref = transformers.Llama4Config(text_config={"num_hidden_layers": 12})
    got = hf_config.nope_layers_from_hf(ref.to_dict())
    self.assertEqual(got, _ref(ref.text_config))
    self.assertEqual(got, (3, 7, 11))

  def test_llama_config_with_no_rope_layers_loads_nope_layers(self):
    cfg = hf_config.config_from_hf({**LLAMA, "no_rope_layers": [1, 1, 1, 0]})
    self.assertEqual(cfg.nope_layers, (3,))
    self.assertEqual([s.use_rope for s in cfg.layer_specs],
                     [True, True, True, False])
    self.assertEqual(hf_config.config_from_hf(LLAMA).nope_layers, ())

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "for each of the 4 layers"):
      hf_config.nope_layers_from_hf({**LLAMA, "no_rope_layers": [1, 0]})
    with self.assertRaisesRegex(ValueError, "0 \\(NoPE\\) or 1"):
      hf_config.nope_layers_from_hf({**LLAMA, "no_rope_layers": [1, 2, 1, 1]})
    with self.assertRaisesRegex(ValueError, ">= 1"):
      hf_config.nope_layers_from_hf({**LLAMA, "no_rope_layer_interval": 0})


if __name__ == "__main__":
  absltest.main()
