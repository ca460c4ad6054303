"""jaxlab.testing.durations: per-module sums from a JUnit XML, the table."""

import json
import os
import shutil
import tempfile

from absl.testing import absltest

from jaxlab.testing import durations

_XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.io.gguf_test.SmolLM2Test" name="test_a" time="25.0"/>
<testcase classname="tests.io.gguf_test.OtherTest" name="test_b" time="1.5"/>
<testcase classname="tests.layering_test" name="test_c" time="0.25"/>
<testcase classname="tests.io.gguf_test.SmolLM2Test" name="test_d" time="0.75">
<skipped message="x"/></testcase>
</testsuite></testsuites>
"""


class DurationsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.dir)
    self.xml = os.path.join(self.dir, "junit.xml")
    with open(self.xml, "w") as f:
      f.write(_XML)

  def test_module_sums(self):
    seconds, n = durations.module_seconds(self.xml)
    self.assertEqual(n, 4)
    # 25.0 + 1.5 + 0.75 (two classes of one module); a module-level test
    # function's classname is the module itself.
    self.assertEqual(seconds, {"tests/io/gguf_test.py": 27.25,
                               "tests/layering_test.py": 0.25})

  def test_cli_merges_kinds_and_fills_the_doc(self):
    data, doc = (os.path.join(self.dir, n) for n in ("d.json", "t.md"))
    with open(doc, "w") as f:
      f.write("# T\n<!-- durations -->\nold\n<!-- /durations -->\nafter\n")
    durations.main([self.xml, "--kind=Intel", "--data", data, "--doc", doc])
    # A second kind: the other module only, with its own time.
    with open(self.xml, "w") as f:
      f.write(_XML.replace('time="25.0"', 'time="40.0"'))
    durations.main([self.xml, "--kind=AMD", "--note=clean clone",
                    "--data", data, "--doc", doc])
    with open(data) as f:
      d = json.load(f)
    self.assertEqual(d["Intel"]["modules"]["tests/io/gguf_test.py"], 27.2)
    self.assertEqual(d["AMD"]["modules"]["tests/io/gguf_test.py"], 42.2)
    self.assertEqual(d["AMD"]["tests"], 4)
    with open(doc) as f:
      text = f.read()
    self.assertNotIn("old", text)
    self.assertTrue(text.endswith("<!-- /durations -->\nafter\n"))
    self.assertIn("- AMD: clean clone", text)
    self.assertIn("| test module | AMD (s) | Intel (s) |", text)
    self.assertIn("| **all, worker seconds** | **42** (4 tests) | "
                  "**27** (4 tests) |", text)
    rows = [l for l in text.splitlines() if l.startswith("| `")]
    self.assertEqual(rows, ["| `tests/io/gguf_test.py` | 42.2 | 27.2 |",
                            "| `tests/layering_test.py` | 0.2 | 0.2 |"])

  def test_doc_without_markers_is_one_clear_error(self):
    doc = os.path.join(self.dir, "t.md")
    with open(doc, "w") as f:
      f.write("# no block\n")
    with self.assertRaisesRegex(ValueError, "no <!-- durations -->"):
      durations.write_doc({}, doc)


if __name__ == "__main__":
  absltest.main()
