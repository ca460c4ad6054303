"""The README's CPU benchmark tables are the ones the committed JSON makes."""

import contextlib
import io
import os
import re

from absl.testing import absltest

from experiments.bench import _tables

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class BenchTablesTest(absltest.TestCase):

  def test_readme_block_equals_generated_tables(self):
    with open(os.path.join(ROOT, "README.md")) as f:
      readme = f.read()
    m = re.search(r"<!-- bench-tables:[^>]*-->\n(.*?)\n<!-- /bench-tables -->",
                  readme, re.S)
    self.assertIsNotNone(m, "README lacks the bench-tables markers")
    with contextlib.redirect_stdout(io.StringIO()):
      text = _tables.main([f"--dir={os.path.join(ROOT, 'docs', 'bench')}"])
    self.assertEqual(m.group(1).strip(), text.strip(),
                     "README's benchmark tables differ from docs/bench JSON: "
                     "rerun python -m experiments.bench._tables")


if __name__ == "__main__":
  absltest.main()
