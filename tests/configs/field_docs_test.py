"""--help's field meanings, read from the configs' comments."""

import os
import tempfile
import textwrap

from absl.testing import absltest

from jaxlab import main
from jaxlab.configs import _field_docs as field_docs

SOURCE = textwrap.dedent('''\
    import ml_collections


    def train_config():
      return ml_collections.ConfigDict({
          "steps": 1000,      # optimizer updates
          # global, per optimizer step
          "batch_size": 32,
          "seq_len": 128,
      })


    def get_config(arg=None):
      c = ml_collections.ConfigDict()
      c.train = train_config()
      # The checkpoint to start from
      # ("" = scratch).
      c.init_from = ""
      c.data = ml_collections.ConfigDict(dict(
          path="",  # a Hub id or a local copy
          nested=ml_collections.ConfigDict({"k": 1}),  # a section
      ))
      c.unlearn = ml_collections.ConfigDict()
      c.unlearn.update(lam=1.5, lr=5e-4)  # weight of the retain term
      c.seeds = (0, 1, 2)
      if arg == "paper":
        # the paper's seeds: not the field's meaning
        c.seeds = (0,)
        c.extra = 3  # only in this preset
      return c
    ''')


class FieldDocsTest(absltest.TestCase):

  def test_each_pattern_and_the_first_assignment_rule(self):
    with tempfile.TemporaryDirectory() as d:
      path = os.path.join(d, "cfg.py")
      with open(path, "w") as f:
        f.write(SOURCE)
      docs = field_docs.field_comments(path)
    self.assertEqual(docs, {
        "train.steps": "optimizer updates",
        "train.batch_size": "global, per optimizer step",
        "init_from": 'The checkpoint to start from ("" = scratch).',
        "data.path": "a Hub id or a local copy",
        "data.nested": "a section",
        "unlearn.lam": "weight of the retain term",
        "unlearn.lr": "weight of the retain term",
        "extra": "only in this preset",
    })

  def test_help_shows_meanings_and_preset_purposes(self):
    text = main.config_help("pmc")
    self.assertIn("  data.path=''\n      hf: Hub id or local copy; grain: "
                  "globs; jsonl: a file\n", text)
    self.assertIn("  table_id='unlearning'\n      the results table's id "
                  "(docs markers)\n", text)
    self.assertIn("  train.batch_size=32\n      global, per optimizer step\n",
                  text)
    self.assertIn("  tiny       the test / colab miniature", text)
    self.assertIn("  paper      the paper's checkpoint (init_from)", text)
    # A preset's own seeds comment is not the field's meaning.
    self.assertIn("  seeds=(0, 1, 2)\n  sharding_rules=", text)


if __name__ == "__main__":
  absltest.main()
