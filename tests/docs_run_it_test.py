"""Every paper doc opens with "Run it", and each command there names a
config and presets that exist (the docs cannot drift from the configs)."""

import glob
import importlib
import os
import re

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = re.compile(r"--config=(\w+):([\w,=.]+)")  # presets, key=value args
PAPER_RUN = re.compile(r"--config=(\w+):paper --workdir=\S+(?: \\\n  --config\.\S+)*")
OVERRIDE = re.compile(r"--config\.([\w.]+)=(\S+)")


class RunItTest(absltest.TestCase):

  def test_every_paper_doc_has_run_it_with_valid_configs(self):
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "papers", "*.md")))
    self.assertNotEmpty(docs)
    for doc in docs:
      with open(doc) as f:
        text = f.read()
      names = re.findall(r"^  config: (\w+)$", text, re.M)
      with self.subTest(doc=os.path.basename(doc)):
        self.assertIn("\n## Run it\n", text)
        section = text.split("\n## Run it\n", 1)[1].split("\n## ", 1)[0]
        found = CONFIG.findall(section)
        # Each of the doc's configs has its miniature and its TPU compile.
        for name in names:
          self.assertIn((name, "tiny"), found)
          self.assertIn((name, "paper"), found)
        for name, presets in found:
          module = importlib.import_module(f"jaxlab.configs.{name}")
          module.get_config(presets)  # raises on an unknown preset
        # A paper run's overrides are the preset's own values.
        for m in PAPER_RUN.finditer(section):
          cfg = importlib.import_module(
              f"jaxlab.configs.{m.group(1)}").get_config("paper")
          for field, value in OVERRIDE.findall(m.group(0)):
            got = cfg
            for part in field.split("."):
              got = got[part]
            self.assertEqual(value, got, f"{m.group(1)}: {field}")


if __name__ == "__main__":
  absltest.main()
