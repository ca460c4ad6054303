"""One config schema: every jaxlab/configs/*.py file, parse_arg and rope_scaling."""

import glob
import importlib
import os

from absl.testing import absltest
from absl.testing import parameterized
import ml_collections
import numpy as np

from jaxlab.configs import common
from jaxlab.models import registry as model_registry
from jaxlab.nn import rope

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every experiment config (a new file is covered without editing this test).
CONFIG_NAMES = tuple(sorted(
    os.path.basename(p)[:-3]
    for p in glob.glob(os.path.join(ROOT, "jaxlab", "configs", "*.py"))
    if not os.path.basename(p).startswith(("_", "common"))))


def _leaf_paths(cfg: ml_collections.ConfigDict, prefix: str = "") -> set[str]:
  out = set()
  for key, value in cfg.items():
    if isinstance(value, ml_collections.ConfigDict):
      out |= _leaf_paths(value, f"{prefix}{key}.")
    else:
      out.add(f"{prefix}{key}")
  return out


def _has_path(cfg: ml_collections.ConfigDict, path: str) -> bool:
  node = cfg
  for key in path.split("."):
    if not isinstance(node, ml_collections.ConfigDict) or key not in node:
      return False
    node = node[key]
  return True


class EveryConfigTest(parameterized.TestCase):

  def test_every_config_is_covered(self):
    self.assertContainsSubset({"lm_tiny", "generate", "pmc", "mathfimer",
                               "rope_extension", "frequency_entropy"},
                              set(CONFIG_NAMES))

  @parameterized.named_parameters(*[(n, n) for n in CONFIG_NAMES])
  def test_loads_with_default_and_tiny_from_base(self, name):
    module = importlib.import_module(f"jaxlab.configs.{name}")
    base_paths = _leaf_paths(common.base_config())
    for arg in (None, "tiny"):
      cfg = module.get_config(arg)
      self.assertIsInstance(cfg, ml_collections.ConfigDict)
      # A non-decoder model (a registered builder, e.g. vit_classifier) has
      # its own `model` fields; every other base section stays.
      decoder = cfg.model.get("name", "decoder") == "decoder"
      if not decoder:
        self.assertIn(cfg.model.name, model_registry.available())
      missing = sorted(p for p in base_paths if not _has_path(cfg, p)
                       and (decoder or not p.startswith("model.")))
      self.assertEqual(missing, [], f"jaxlab/configs/{name}.py:{arg} lacks base "
                       "fields: start from common.base_config() and keep its "
                       "sections; give experiment-specific sections their "
                       "own names (pmc: facts, mathfimer: problems)")
      exp = os.path.join(ROOT, "jaxlab", "experiments", cfg.experiment)
      self.assertTrue(os.path.exists(exp + ".py") or os.path.exists(
          os.path.join(exp, "__init__.py")), cfg.experiment)
    # `tiny` is a real preset: it changes something.
    self.assertNotEqual(module.get_config(None).to_dict(),
                        module.get_config("tiny").to_dict())

  @parameterized.named_parameters(*[(n, n) for n in CONFIG_NAMES])
  def test_model_section_is_decoder_config_fields(self, name):
    cfg = importlib.import_module(f"jaxlab.configs.{name}").get_config("tiny")
    if cfg.model.get("name") != "decoder":
      self.skipTest(f"{name}: model {cfg.model.get('name')!r}")
    dcfg = model_registry.decoder_config(cfg.model, vocab_size=300)
    self.assertEqual(dcfg.dim, cfg.model.dim)
    self.assertEqual(dcfg.num_layers, cfg.model.num_layers)
    self.assertIsNone(dcfg.rope_scaling)  # the base default: plain RoPE

  @parameterized.named_parameters(*[(n, n) for n in CONFIG_NAMES])
  def test_unknown_preset_is_one_clear_error(self, name):
    module = importlib.import_module(f"jaxlab.configs.{name}")
    with self.assertRaisesRegex(ValueError,
                                r"unknown preset 'tinny'.*valid presets: .*"
                                r"tiny"):
      module.get_config("tinny")
    with self.assertRaisesRegex(ValueError, "unknown preset 'nope'"):
      module.get_config("tiny,nope")


class ParseArgTest(absltest.TestCase):

  def test_presets_and_typed_values(self):
    a = common.parse_arg(" tiny , steps=12,lr=0.5,name=x,flag=false",
                         tiny=False, small=False, steps=0, lr=0.0, name="",
                         flag=True)
    self.assertEqual(a.to_dict(), {"tiny": True, "small": False, "steps": 12,
                                   "lr": 0.5, "name": "x", "flag": False})
    self.assertEqual(common.parse_arg(None, tiny=False).to_dict(),
                     {"tiny": False})
    self.assertEqual(common.parse_arg("", tiny=False).to_dict(),
                     {"tiny": False})

  def test_errors_name_the_arg_and_the_valid_ones(self):
    cases = [
        ("tiny,smal", "unknown preset 'smal'.*valid presets: small, tiny; "
                      "valid key=value args: steps"),
        ("stepz=3", "unknown config arg 'stepz'.*valid key=value args: "
                    "steps"),
        ("steps", "config arg 'steps' needs a value"),
        ("steps=ten", "steps='ten': expected int"),
        ("tiny=maybe", "tiny='maybe': expected a boolean"),
    ]
    for arg, regex in cases:
      with self.subTest(arg), self.assertRaisesRegex(ValueError, regex):
        common.parse_arg(arg, tiny=False, small=False, steps=0)


class RopeScalingFieldTest(absltest.TestCase):

  def _model_cfg(self, **scaling):
    cfg = common.decoder_config()
    cfg.update(dim=64, num_heads=2, num_kv_heads=2, rope_theta=10000.0)
    cfg.rope_scaling.update(scaling)
    return cfg

  def test_default_is_plain_rope(self):
    dcfg = model_registry.decoder_config(self._model_cfg(), vocab_size=10)
    self.assertIsNone(dcfg.rope_scaling)
    inv, scale = dcfg.rope_tables()
    np.testing.assert_allclose(inv, rope.default_inv_freq(32, 1e4),
                               rtol=1e-6)
    self.assertEqual(scale, 1.0)

  def test_config_field_reaches_the_decoder(self):
    model_cfg = self._model_cfg(method="yarn", factor=4.0,
                                original_max_position=64)
    model_cfg.rope_scaling.beta_fast = 16.0  # a method option, from a file
    dcfg = model_registry.decoder_config(model_cfg, vocab_size=10)
    self.assertEqual(dict(dcfg.rope_scaling),
                     {"method": "yarn", "factor": 4.0,
                      "original_max_position": 64, "beta_fast": 16.0})
    want_inv, want_scale = rope.inv_freq(
        "yarn", head_dim=32, base=1e4, factor=4.0, original_max_position=64,
        beta_fast=16.0)
    inv, scale = dcfg.rope_tables()
    np.testing.assert_array_equal(inv, want_inv)
    self.assertAlmostEqual(scale, want_scale)
    self.assertGreater(scale, 1.0)  # YaRN's 0.1 ln S + 1

  def test_unknown_method_is_an_error(self):
    with self.assertRaisesRegex(ValueError, "unknown RoPE scaling method "
                                "'yarnn'.*valid choices: .*mrope_pro"):
      model_registry.decoder_config(self._model_cfg(method="yarnn"),
                                    vocab_size=10)

  def test_dynamic_ntk_rules_live_in_rope(self):
    # Train short / test long: dynamic NTK keeps factor 1 and grows its base
    # with the length, so at 4x it equals static NTK with S = 4.
    dyn = rope.extension_scaling("dynamic_ntk", train_len=64, eval_len=256)
    self.assertEqual(dyn, {"method": "dynamic_ntk", "factor": 1.0,
                           "original_max_position": 64})
    self.assertEqual(rope.extension_scaling("pi", train_len=64,
                                            eval_len=256)["factor"], 4.0)
    self.assertIsNone(rope.extension_scaling("default", train_len=64,
                                             eval_len=256))
    got, _ = rope.scaling_tables(dyn, head_dim=32, base=1e4, seq_len=256)
    want, _ = rope.inv_freq("ntk", head_dim=32, base=1e4, factor=4.0)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # Static methods ignore the length.
    pi = rope.extension_scaling("pi", train_len=64, eval_len=256)
    np.testing.assert_array_equal(
        rope.scaling_tables(pi, head_dim=32, base=1e4, seq_len=999)[0],
        rope.scaling_tables(pi, head_dim=32, base=1e4)[0])


if __name__ == "__main__":
  absltest.main()
