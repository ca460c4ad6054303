"""Tests for jaxlab.registry (the one name -> function registry)."""

from absl.testing import absltest

from jaxlab import registry
from jaxlab.nn import rope
from jaxlab.train import losses


class RegistryTest(absltest.TestCase):

  def test_register_get_and_mapping_view(self):
    reg = registry.Registry("widget")

    @reg.register("b")
    def b():
      return 2

    reg.register("a")(len)
    self.assertIs(reg.get("b"), b)
    self.assertIs(reg["a"], len)
    self.assertEqual(reg.names(), ("a", "b"))
    self.assertEqual(list(reg), ["a", "b"])
    self.assertLen(reg, 2)
    self.assertIn("a", reg)
    self.assertNotIn("c", reg)

  def test_unknown_name_lists_choices_and_is_value_and_key_error(self):
    reg = registry.Registry("widget")
    reg.register("x")(len)
    reg.register("y")(abs)
    with self.assertRaisesRegex(
        ValueError, r"^unknown widget 'z'; valid choices: x, y$"):
      reg.get("z")
    with self.assertRaises(KeyError):
      reg["z"]  # pylint: disable=pointless-statement

  def test_duplicate_name_is_refused_unless_same_object(self):
    reg = registry.Registry("widget")
    reg.register("x")(len)
    reg.register("x")(len)  # Idempotent: re-running a registration is fine.
    with self.assertRaisesRegex(ValueError, "widget 'x' is already registered"):
      reg.register("x")(abs)

  def test_library_registries_share_the_error(self):
    with self.assertRaisesRegex(ValueError, "unknown loss 'nope'; valid "
                                "choices: .*lm"):
      losses.get("nope")
    self.assertIn("mrope_pro", rope.available())

  def test_dataclass_from_config(self):
    import dataclasses  # pylint: disable=g-import-not-at-top
    from ml_collections import config_dict  # pylint: disable=g-import-not-at-top

    @dataclasses.dataclass(frozen=True)
    class Cfg:
      dim: int = 4
      dims: tuple = ()
      opts: dict | None = None
      act: str = "gelu"

    section = config_dict.ConfigDict(
        {"name": "m", "dims": [1, [2, 3]], "opts": {"a": [4]}, "act": None})
    cfg = registry.dataclass_from_config(
        Cfg, section, defaults={"act": "relu", "dim": 8}, dim=16)
    # lists -> tuples (nested), ConfigDict -> dict, `name` dropped; a
    # default fills only a missing key (act=None is kept), overrides win.
    self.assertEqual(cfg, Cfg(dim=16, dims=(1, (2, 3)), opts={"a": (4,)},
                              act=None))
    self.assertEqual(registry.dataclass_from_config(Cfg, None), Cfg())
    with self.assertRaisesRegex(
        ValueError, r"^model\.vit\.dimz is not a Cfg field; valid: act, dim, "
        r"dims, opts$"):
      registry.dataclass_from_config(Cfg, {"dimz": 1}, where="model.vit")


if __name__ == "__main__":
  absltest.main()
