"""Tests of jaxlab/experiments/results.py (schema) and jaxlab/experiments/report.py."""

import glob
import io
import json
import math
import os
import shutil
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from scipy import stats

from jaxlab import configs as configs_lib
from jaxlab.experiments import report
from jaxlab.experiments import results


def _cell(seeds, vals):
  return {"seeds": list(seeds), "values": list(vals)}


def _result(rows, *, columns=None, comparisons=(), table_id="t",
            command="python fake.py --workdir=w"):
  columns = columns or [{"key": "acc", "label": "accuracy", "decimals": 1,
                         "scale": 100.0, "spread": True}]
  return {"schema": 1, "experiment": "fake", "command": command,
          "tables": [{"id": table_id, "title": "Fake", "row_label": "method",
                      "columns": columns,
                      "rows": [{"label": k, "cells": v}
                               for k, v in rows.items()]}],
          "comparisons": list(comparisons), "extra": {}}


class FormatTest(parameterized.TestCase):

  def test_mean_sample_std_by_hand(self):
    # mean 0.23333, deviations -0.1333, -0.0333, 0.1667:
    # var = (0.017778 + 0.001111 + 0.027778) / 2 = 0.023333, std 0.15275.
    col = {"decimals": 1, "scale": 100.0}
    self.assertEqual(report.fmt_cell(_cell([0, 1, 2], [0.1, 0.2, 0.4]), col),
                     "23.3 ± 15.3")
    m, s, n = report.mean_std([0.1, 0.2, 0.4])
    self.assertAlmostEqual(s, math.sqrt(0.07 / 3), places=12)
    self.assertEqual(n, 3)

  @parameterized.named_parameters(
      ("one_seed", _cell([0], [0.5]), {"decimals": 2}, None, "0.50"),
      ("no_spread_column", _cell([0, 1], [1.0, 3.0]),
       {"decimals": 0, "spread": False}, None, "2"),
      ("missing_values_left_out", _cell([0, 1, 2], [1.0, None, 3.0]),
       {"decimals": 1}, 2, "2.0 ± 1.4"),
      ("n_marked_when_not_default", _cell([0, 1], [1.0, 3.0]),
       {"decimals": 1}, 3, "2.0 ± 1.4 (n = 2)"),
      ("empty", None, {"decimals": 1}, None, "–"),
      ("negative_zero", _cell([0, 1], [-0.0001, 0.0001]), {"decimals": 1},
       None, "0.0 ± 0.0"),
  )
  def test_cells(self, cell, col, n_default, want):
    self.assertEqual(report.fmt_cell(cell, col, n_default), want)

  def test_fmt_num_sign(self):
    self.assertEqual(report.fmt_num(0.1234, 2, sign=True), "+0.12")
    self.assertEqual(report.fmt_num(-0.1234, 2, sign=True), "-0.12")
    self.assertEqual(report.fmt_num(-0.001, 2, sign=True), "0.00")
    self.assertEqual(report.fmt_num(float("nan"), 2), "n/a")


class StatisticsTest(absltest.TestCase):

  def test_paired_differences_match_by_seed_not_position(self):
    a = _cell([0, 1, 2], [1.0, 2.0, 3.0])
    b = _cell([2, 0, 7], [10.0, 20.0, 30.0])
    self.assertEqual(report.paired_differences(a, b), [1.0 - 20.0, 3.0 - 10.0])

  def test_interval_by_hand(self):
    # diffs 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t_{0.975, 2} = 4.302652729.
    st = report.paired_interval([1.0, 2.0, 3.0])
    half = 4.302652729749464 / math.sqrt(3)
    self.assertAlmostEqual(st.mean, 2.0)
    self.assertAlmostEqual(st.low, 2.0 - half, places=9)
    self.assertAlmostEqual(st.high, 2.0 + half, places=9)
    self.assertEqual(st.n, 3)

  def test_interval_equals_scipy_paired_t_test(self):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=7), rng.normal(size=7) + 0.3
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    st = report.paired_interval(list(a - b))
    self.assertAlmostEqual(st.low, ci.low, places=10)
    self.assertAlmostEqual(st.high, ci.high, places=10)
    self.assertAlmostEqual(st.std, float(np.std(a - b, ddof=1)), places=12)

  def test_one_pair_has_no_interval(self):
    st = report.paired_interval([0.5])
    self.assertEqual(st.n, 1)
    self.assertTrue(math.isnan(st.low))

  def test_identical_differences_up_to_float_rounding(self):
    # 0.7 − 0.6 = 0.09999999999999998 and 0.4 − 0.3 = 0.10000000000000003:
    # the same difference, s_d ~ 3e-17 from rounding only.
    rounded = [0.7 - 0.6, 0.4 - 0.3, 0.2 - 0.1]
    self.assertGreater(np.std(rounded), 0.0)
    self.assertTrue(report.paired_interval(rounded).identical)
    self.assertTrue(report.paired_interval([-3.0, -3.0, -3.0]).identical)
    self.assertFalse(report.paired_interval([0.1, 0.2, 0.2]).identical)
    self.assertFalse(report.paired_interval([0.1, 0.1 + 1e-6, 0.1]).identical)
    self.assertFalse(report.paired_interval([]).identical)

  def test_degenerate_reasons(self):
    reason = lambda d: report.degenerate_reason(report.paired_interval(d))  # pylint: disable=g-long-lambda
    self.assertEqual(reason([]), "no seed in both rows")
    self.assertEqual(reason([0.5]), "n = 1: no interval")
    # n = 2 comes first even when the two differences are also identical.
    self.assertEqual(reason([0.5, 0.7]), "n = 2: no interval")
    self.assertEqual(reason([0.5, 0.5]), "n = 2: no interval")
    self.assertEqual(reason([0.5, 0.5, 0.5]), "identical in every seed")
    self.assertIsNone(reason([0.5, 0.5, 0.6]))


class RenderTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.res = _result(
        {"A": {"acc": _cell([0, 1, 2], [0.5, 0.6, 0.7])},
         "B": {"acc": _cell([0, 1, 2], [0.4, 0.4, 0.5])}},
        comparisons=[{"table": "t", "column": "acc", "a": "A", "b": "B",
                      "label": "A − B"}])

  def test_table_markdown(self):
    # diffs 0.1, 0.2, 0.2: mean 0.1667, sd 0.05774, half-width
    # 4.3027 * 0.05774 / sqrt(3) = 0.14343 -> [2.3, 31.0] x 100.
    got = report.render_table(self.res, "t", source="r/fake.json")
    want = textwrap.dedent("""\
        *Fake: mean ± sample std (ddof 1) over n = 3 seeds (seeds 0–2); generated from [fake.json](r/fake.json).*

        | method | accuracy |
        |---|---|
        | A | 60.0 ± 10.0 |
        | B | 43.3 ± 5.8 |

        Paired differences (a − b over the seeds both rows have; mean and 95 % t-interval):

        | comparison | column | difference | 95 % interval | n |
        |---|---|---|---|---|
        | A − B | accuracy | +16.7 | [+2.3, +31.0] | 3 |
        """)
    self.assertEqual(got, want)

  def test_degenerate_comparisons_say_why_instead_of_an_interval(self):
    # A − B: diffs 0.012, 0.024 over seeds 0, 1 (n = 2, mean 1.8 x 100).
    # C − D: diffs 0.1 in every seed (up to rounding): a zero-width
    # t-interval [+10.0, +10.0] before. E − A: no seed in common.
    comp = lambda a, b: {"table": "t", "column": "acc", "a": a, "b": b}  # pylint: disable=g-long-lambda
    res = _result(
        {"A": {"acc": _cell([0, 1], [0.512, 0.624])},
         "B": {"acc": _cell([0, 1], [0.5, 0.6])},
         "C": {"acc": _cell([0, 1, 2], [0.7, 0.4, 0.2])},
         "D": {"acc": _cell([0, 1, 2], [0.6, 0.3, 0.1])},
         "E": {"acc": _cell([7], [0.3])},
         "F": {"acc": _cell([0, 1, 2], [0.5, 0.6, 0.7])},
         "G": {"acc": _cell([0, 1, 2], [0.4, 0.4, 0.5])}},
        comparisons=[comp("A", "B"), comp("C", "D"), comp("E", "A"),
                     comp("F", "G")])
    got = report.render_table(res, "t").splitlines()
    first = got.index("| comparison | column | difference | 95 % interval "
                      "| n |")
    self.assertEqual(got[first + 2:], [
        "| A − B | accuracy | +1.8 | n = 2: no interval | 2 |",
        "| C − D | accuracy | +10.0 | identical in every seed | 3 |",
        "| E − A | accuracy | n/a | no seed in both rows | 0 |",
        # Not degenerate: the interval of test_table_markdown.
        "| F − G | accuracy | +16.7 | [+2.3, +31.0] | 3 |"])

  def test_rows_and_columns_selection(self):
    got = report.render_table(self.res, "t", rows=["B"])
    self.assertIn("| B | 43.3 ± 5.8 |", got)
    self.assertNotIn("| A |", got)
    self.assertNotIn("Paired", got)  # the comparison needs both rows
    with self.assertRaisesRegex(report.ReportError, "no column"):
      report.render_table(self.res, "t", columns=["nope"])
    with self.assertRaisesRegex(report.ReportError, "no row"):
      report.render_table(self.res, "t", rows=["C"])
    with self.assertRaisesRegex(report.ReportError, "no table"):
      report.render_table(self.res, "u")

  def test_render_doc_rewrites_only_blocks_and_is_idempotent(self):
    text = ("intro\n<!-- report: fake/t rows=\"A\" -->\nhand-typed | 99 |\n"
            "<!-- /report -->\noutro\n")
    new = report.render_doc(text, {"fake": self.res},
                            doc_dir="/r/docs/papers", repo="/r")
    self.assertTrue(new.startswith("intro\n<!-- report: fake/t rows=\"A\" -->"
                                   "\n*Fake"))
    self.assertIn("| A | 60.0 ± 10.0 |", new)
    self.assertNotIn("99", new)
    self.assertIn("[fake.json](../results/fake.json)", new)
    self.assertTrue(new.endswith("<!-- /report -->\noutro\n"))
    self.assertEqual(report.render_doc(new, {"fake": self.res},
                                       doc_dir="/r/docs/papers", repo="/r"),
                     new)

  def test_render_doc_errors(self):
    with self.assertRaisesRegex(report.ReportError, "closing marker"):
      report.render_doc("<!-- report: fake/t -->\nx\n", {"fake": self.res},
                        doc_dir="/r", repo="/r")
    with self.assertRaisesRegex(report.ReportError, "no docs/results/nope"):
      report.render_doc("<!-- report: nope/t -->\n<!-- /report -->",
                        {"fake": self.res}, doc_dir="/r", repo="/r")

  def test_check_flags_a_hand_edited_table(self):
    with tempfile.TemporaryDirectory() as repo:
      os.makedirs(os.path.join(repo, "docs", "results"))
      os.makedirs(os.path.join(repo, "docs", "papers"))
      with open(os.path.join(repo, "docs", "results", "fake.json"), "w") as f:
        json.dump(self.res, f)
      readme = os.path.join(repo, "README.md")
      with open(readme, "w") as f:
        f.write("<!-- report: fake/t -->\n<!-- /report -->\n")
      self.assertEqual(report.update_docs(repo, check=True), ["README.md"])
      self.assertEqual(report.update_docs(repo), ["README.md"])
      self.assertEqual(report.update_docs(repo, check=True), [])
      with open(readme) as f:
        text = f.read()
      with open(readme, "w") as f:
        f.write(text.replace("60.0 ± 10.0", "61.0 ± 10.0"))
      self.assertEqual(report.main(["--check", "--repo", repo]), 1)


_DOC = """---
papers:
- id: {id}
  title: Paper {id} | a title
  code: jaxlab/a.py, jaxlab/b.py
  config: {cfg}
  colab: colabs/{cfg}.ipynb
  status: {status}
  verdict: verdict of {id}
---
# Paper {id}
"""


class PaperMapTest(absltest.TestCase):

  def _repo(self, repo, docs):
    os.makedirs(os.path.join(repo, "docs", "results"), exist_ok=True)
    os.makedirs(os.path.join(repo, "docs", "papers"), exist_ok=True)
    for name, kw in docs.items():
      with open(os.path.join(repo, "docs", "papers", name), "w") as f:
        f.write(_DOC.format(**kw))

  def test_front_matter_fields(self):
    papers = report.parse_front_matter(
        _DOC.format(id="B", cfg="pmc", status="holds partly"), "x.md")
    self.assertEqual(papers, [{
        "id": "B", "title": "Paper B | a title",
        "code": "jaxlab/a.py, jaxlab/b.py", "config": "pmc",
        "colab": "colabs/pmc.ipynb", "status": "holds partly",
        "verdict": "verdict of B"}])
    self.assertEqual(report.parse_front_matter("# no front matter\n"), [])

  def test_map_rendered_sorted_and_checked(self):
    with tempfile.TemporaryDirectory() as repo:
      self._repo(repo, {
          "z.md": dict(id="A", cfg="za", status="claim holds"),
          "a.md": dict(id="C", cfg="ac", status="does not hold")})
      readme = os.path.join(repo, "README.md")
      with open(readme, "w") as f:
        f.write("# x\n<!-- report: papers/map -->\n<!-- /report -->\n")
      self.assertEqual(report.update_docs(repo, check=True), ["README.md"])
      self.assertEqual(report.update_docs(repo), ["README.md"])
      with open(readme) as f:
        text = f.read()
      rows = [l for l in text.splitlines() if l.startswith("| A.")
              or l.startswith("| C.")]
      self.assertEqual(rows, [
          "| A. Paper A \\| a title | claim holds | verdict of A | "
          "`jaxlab/a.py`, `jaxlab/b.py` | `za` | [za.ipynb](colabs/za.ipynb)"
          " | [z.md](docs/papers/z.md) |",
          "| C. Paper C \\| a title | does not hold | verdict of C | "
          "`jaxlab/a.py`, `jaxlab/b.py` | `ac` | [ac.ipynb](colabs/ac.ipynb)"
          " | [a.md](docs/papers/a.md) |"])
      self.assertIn("*2 papers,", text)
      self.assertEqual(report.update_docs(repo, check=True), [])
      # A doc's verdict changes: the map is stale until regenerated.
      self._repo(repo, {"a.md": dict(id="C", cfg="ac", status="holds partly")})
      self.assertEqual(report.update_docs(repo, check=True), ["README.md"])

  def test_front_matter_errors(self):
    bad = _DOC.format(id="A", cfg="a", status="mostly holds")
    with self.assertRaisesRegex(report.ReportError,
                                "x.md: paper A: status 'mostly holds'"):
      report.parse_front_matter(bad, "x.md")
    with self.assertRaisesRegex(report.ReportError, "missing verdict"):
      report.parse_front_matter(
          "\n".join(l for l in _DOC.format(id="A", cfg="a",
                                           status="claim holds").splitlines()
                    if "verdict" not in l), "x.md")
    with self.assertRaisesRegex(report.ReportError, "never closed"):
      report.parse_front_matter("---\npapers:\n- id: A\n", "x.md")
    with tempfile.TemporaryDirectory() as repo:
      self._repo(repo, {"a.md": dict(id="A", cfg="a", status="claim holds"),
                        "b.md": dict(id="A", cfg="b", status="claim holds")})
      with self.assertRaisesRegex(report.ReportError, "in both"):
        report.paper_docs(repo)


class MergeAndVerifyTest(absltest.TestCase):

  def test_merge_concatenates_seeds(self):
    r0 = _result({"A": {"acc": _cell([0], [0.5])}}, command="c0")
    r1 = _result({"A": {"acc": _cell([1], [0.7])},
                  "B": {"acc": _cell([1], [0.1])}}, command="c1")
    m = report.merge([r0, r1])
    rows = {r["label"]: r["cells"] for r in m["tables"][0]["rows"]}
    self.assertEqual(rows["A"]["acc"], _cell([0, 1], [0.5, 0.7]))
    self.assertEqual(rows["B"]["acc"], _cell([1], [0.1]))
    self.assertEqual(m["commands"], ["c0", "c1"])
    with self.assertRaisesRegex(report.ReportError, "more than one run"):
      report.merge([r0, r0])

  def test_cell_shift_by_hand(self):
    col = {"decimals": 2, "scale": 1.0}
    # means 2 -> 3, s = 1 both, n = 3: 1 / sqrt(1/3 + 1/3) = 1.2247.
    self.assertAlmostEqual(
        report.cell_shift(_cell([0, 1, 2], [1, 2, 3]),
                          _cell([0, 1, 2], [2, 3, 4]), col),
        1 / math.sqrt(2 / 3))
    # No spread: floored at half the displayed resolution (0.005).
    self.assertEqual(report.cell_shift(_cell([0, 1], [5, 5]),
                                       _cell([0, 1], [5, 5]), col), 0.0)
    self.assertAlmostEqual(report.cell_shift(_cell([0], [5.0]),
                                             _cell([0], [5.01]), col), 2.0)
    self.assertAlmostEqual(
        report.cell_shift(_cell([0], [0.5]), _cell([0], [0.6]),
                          {"decimals": 1, "scale": 100.0}), 0.1 / 0.0005)
    self.assertEqual(report.cell_shift(_cell([0], [5.0]), None, col),
                     math.inf)

  def test_compare_exit_code(self):
    old = _result({"A": {"acc": _cell([0, 1, 2], [0.5, 0.6, 0.7])},
                   "B": {"acc": _cell([0, 1, 2], [0.1, 0.1, 0.1])}})
    near = _result({"A": {"acc": _cell([0, 1, 2], [0.55, 0.65, 0.75])},
                    "B": {"acc": _cell([0, 1, 2], [0.1, 0.1, 0.1])}})
    far = _result({"A": {"acc": _cell([0, 1, 2], [0.5, 0.6, 0.7])},
                   "B": {"acc": _cell([0, 1, 2], [0.3, 0.3, 0.3])}})
    out = io.StringIO()
    shifts = report.compare(old, near)
    # A: +0.05 / sqrt(0.01/3 * 2) = 0.6124.
    self.assertAlmostEqual(shifts[0].shift, 0.05 / math.sqrt(0.02 / 3))
    self.assertEqual(report.print_shifts(shifts, out=out), 0)
    out = io.StringIO()
    self.assertEqual(report.print_shifts(report.compare(old, far), out=out),
                     1)
    self.assertIn("MOVED", out.getvalue())
    self.assertIn("+400.00 SE  t / B / acc: 10.0 ± 0.0 -> 30.0 ± 0.0",
                  out.getvalue())  # 0.2 / floor 0.0005
    missing = _result({"A": {"acc": _cell([0, 1, 2], [0.5, 0.6, 0.7])}})
    self.assertEqual(report.print_shifts(report.compare(old, missing),
                                         out=io.StringIO()), 1)

  def test_rerun_command(self):
    self.assertEqual(
        report.rerun_command("python -m jaxlab.main --config=c.py:tiny "
                             "--workdir=workdirs/x --config.a=1", "/tmp/w"),
        [sys.executable, "-m", "jaxlab.main", "--config=c.py:tiny",
         "--workdir=/tmp/w", "--config.a=1"])
    self.assertEqual(report.rerun_command("tool --workdir old x", "/w"),
                     ["tool", "--workdir=/w", "x"])

  def test_rerun_command_maps_old_launcher_and_config_paths(self):
    self.assertEqual(
        report.rerun_command(
            "python -m experiments.main --config=configs/trust_grpo.py "
            "--workdir=workdirs/trust_grpo_part0 '--config.seeds=(0,1,2)'",
            "/tmp/w"),
        [sys.executable, "-m", "jaxlab.main", "--config=trust_grpo",
         "--workdir=/tmp/w", "--config.seeds=(0,1,2)"])
    # Another program's --config is not the launcher's: left alone.
    self.assertEqual(
        report.rerun_command("python -m jaxlab.experiments.bench dpad "
                             "--config=configs/x.py", "/w"),
        [sys.executable, "-m", "jaxlab.experiments.bench", "dpad",
         "--config=configs/x.py", "--workdir=/w"])

  def test_every_committed_launcher_command_resolves(self):
    """Each docs/results/*.json command replays: its --config is a
    packaged config by name (`report --verify` runs it as is)."""
    n = 0
    for path in sorted(glob.glob(os.path.join(report.REPO, "docs", "results",
                                              "*.json"))):
      with open(path) as f:
        res = json.load(f)
      for cmd in res.get("commands") or [res["command"]]:
        argv = report.rerun_command(cmd, "/tmp/w")
        if argv[1:3] != ["-m", "jaxlab.main"]:
          continue  # e.g. the bench CLI
        value = [a for a in argv if a.startswith("--config=")][0]
        value = value[len("--config="):]
        name = value.partition(":")[0]
        with self.subTest(os.path.basename(path), cmd=cmd[:80]):
          self.assertIn(name, configs_lib.packaged())
          self.assertTrue(os.path.isfile(
              configs_lib.resolve(value).partition(":")[0]))
          n += 1
    self.assertGreater(n, 30)

  def test_verify_reruns_the_committed_command(self):
    # A fake experiment: writes one cell whose values come from its flags.
    fake = textwrap.dedent("""\
        import json, os, sys
        args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
        vals = [float(v) for v in args["vals"].split(",")]
        os.makedirs(args["workdir"], exist_ok=True)
        json.dump({"schema": 1, "command": " ".join(sys.argv), "tables": [
            {"id": "t", "title": "Fake", "columns": [
                {"key": "acc", "label": "acc", "decimals": 2, "scale": 1}],
             "rows": [{"label": "A", "cells": {"acc": {
                 "seeds": list(range(len(vals))), "values": vals}}}]}],
            "comparisons": []}, open(args["workdir"] + "/results.json", "w"))
        """)
    with tempfile.TemporaryDirectory() as repo:
      with open(os.path.join(repo, "fake.py"), "w") as f:
        f.write(fake)
      os.makedirs(os.path.join(repo, "docs", "results"))
      committed = _result(
          {"A": {"acc": _cell([0, 1, 2], [0.5, 0.6, 0.7])}},
          columns=[{"key": "acc", "label": "acc", "decimals": 2,
                    "scale": 1}])
      for name, vals, want in (("same", "0.5,0.6,0.7", 0),
                               ("moved", "0.9,1.0,1.1", 1)):
        committed["command"] = (f"python fake.py --workdir=workdirs/{name} "
                                f"--vals={vals}")
        with open(os.path.join(repo, "docs", "results", f"{name}.json"),
                  "w") as f:
          json.dump(committed, f)
        out = io.StringIO()
        self.assertEqual(report.verify(name, repo=repo, out=out), want,
                         out.getvalue())
        # The rerun went to a temporary workdir, not the committed one.
        self.assertFalse(os.path.exists(os.path.join(repo, "workdirs")))
      self.assertIn("+4.90 SE", out.getvalue())  # 0.4 / sqrt(0.02/3)

  def test_workdir_prints_the_run_tables(self):
    with tempfile.TemporaryDirectory() as tmp:
      t = results.Table("t", "T", [results.Column("acc", "acc", 2)],
                        row_label="m")
      t.add("A", "acc", 0, 0.5)
      t.add("A", "acc", 1, 0.75)
      res = results.write(tmp, "fake", tables=[t],
                          comparisons=[], argv=["jaxlab/main.py"])
      before = sorted(os.listdir(tmp))
      out = io.StringIO()
      with mock.patch.object(sys, "stdout", out):
        self.assertEqual(report.main(["--workdir", tmp]), 0)
      self.assertEqual(sorted(os.listdir(tmp)), before)  # nothing written
    src = os.path.join(tmp, "results.json")
    self.assertEqual(out.getvalue(), f"# fake: {src}\n\n" + report.render_table(
        res, "t", source=src, name="t"))
    self.assertIn("| A | 0.62 ± 0.18 |", out.getvalue())
    # A run without tables (train): its final values.
    with tempfile.TemporaryDirectory() as tmp:
      results.write(tmp, "train", fields={"loss": 1.23456, "step": 8,
                                          "preempted": True},
                    argv=["jaxlab/main.py"])
      text = report.render_workdir(tmp)
    self.assertIn("**Preempted**", text)
    self.assertIn("| loss | 1.2346 |\n| step | 8 |", text)
    with self.assertRaisesRegex(FileNotFoundError, "no results.json"):
      report.render_workdir(tmp)

  def test_add_refuses_a_preempted_run(self):
    with tempfile.TemporaryDirectory() as tmp:
      results.write(os.path.join(tmp, "w"), "train",
                    fields={"preempted": True}, argv=["jaxlab/main.py"])
      with self.assertRaisesRegex(report.ReportError, "was preempted"):
        report.add("x", [os.path.join(tmp, "w")], repo=tmp)
      self.assertFalse(os.path.exists(os.path.join(tmp, "docs")))

  def test_add_copies_and_merges(self):
    with tempfile.TemporaryDirectory() as tmp:
      for seed in (0, 1):
        t = results.Table("t", "T", [results.Column("acc", "acc", 2)])
        t.add("A", "acc", seed, 0.5 + seed)
        results.write(os.path.join(tmp, f"w{seed}"), "fake", tables=[t],
                      argv=["jaxlab/main.py", f"--config.seed={seed}"])
      path = report.add("fake", [os.path.join(tmp, "w0"),
                                 os.path.join(tmp, "w1")], repo=tmp)
      with open(path) as f:
        res = json.load(f)
      self.assertEqual(res["tables"][0]["rows"][0]["cells"]["acc"],
                       _cell([0, 1], [0.5, 1.5]))
      self.assertEqual(len(res["commands"]), 2)


class ResultsSchemaTest(absltest.TestCase):

  def test_config_name(self):
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    own = os.path.join(tmp, "pmc.py")  # a user's file named like a packaged
    with open(own, "w") as f:
      f.write("")
    for value, want in [
        ("configs/trust_grpo.py", "trust_grpo"),          # old layout
        ("jaxlab/configs/pmc.py:table", "pmc:table"),
        (configs_lib.resolve("pmc:tiny"), "pmc:tiny"),    # what main runs
        ("/elsewhere/jaxlab/configs/dpad.py:tiny,steps=3",
         "dpad:tiny,steps=3"),
        ("lm_tiny:tiny", "lm_tiny:tiny"),
        ("my/own_config.py:x", "my/own_config.py:x"),     # not packaged
        (own + ":tiny", own + ":tiny"),                   # not the packaged
    ]:
      with self.subTest(value):
        self.assertEqual(results.config_name(value), want)
    self.assertEqual(
        results.command_line(["/x/jaxlab/main.py",
                              "--config=" + configs_lib.resolve("pmc:tiny"),
                              "--workdir=w"]),
        "python -m jaxlab.main --config=pmc:tiny --workdir=w")


  def test_command_line(self):
    self.assertEqual(
        results.command_line(["/x/jaxlab/main.py",
                              "--config=jaxlab/configs/a.py:tiny",
                              "--workdir=/tmp/a b"]),
        "python -m jaxlab.main --config=jaxlab/configs/a.py:tiny "
        "'--workdir=/tmp/a b'")

  def test_table_and_write(self):
    t = results.Table("t", "T", [results.Column("acc", "acc", 2, 100)],
                      row_label="m")
    t.add("A", "acc", 0, np.float32(0.5))
    t.add("A", "acc", 1, float("nan"))
    t.add_seed("B", 0, {"acc": 0.25})
    with self.assertRaisesRegex(ValueError, "already has seed"):
      t.add("A", "acc", 0, 0.1)
    with self.assertRaisesRegex(ValueError, "no column"):
      t.add("A", "loss", 2, 0.1)
    with self.assertRaisesRegex(ValueError, "unknown column"):
      results.build("x", tables=[t],
                    comparisons=[results.Comparison("t", "loss", "A", "B")])
    with tempfile.TemporaryDirectory() as tmp:
      res = results.write(
          tmp, "demo", tables=[t],
          comparisons=[results.Comparison("t", "acc", "A", "B")],
          extra={"curve": np.arange(3), "bad": float("inf")},
          start_time=0.0, argv=["jaxlab/main.py", "--workdir=w"])
      with open(os.path.join(tmp, "results.json")) as f:
        self.assertEqual(json.load(f), res)
    self.assertEqual(res["tables"][0]["rows"][0]["cells"]["acc"],
                     _cell([0, 1], [0.5, None]))
    self.assertEqual(res["comparisons"][0]["label"], "A − B")
    self.assertEqual(res["extra"], {"curve": [0, 1, 2], "bad": None})
    self.assertEqual(res["command"],
                     "python -m jaxlab.main --workdir=w")
    for key in ("git", "packages", "machine", "wall_time_s"):
      self.assertIn(key, res)
    self.assertIn("jax", res["packages"])
    self.assertGreater(res["machine"]["device_count"], 0)
    self.assertEqual(report.fmt_cell(res["tables"][0]["rows"][0]["cells"][
        "acc"], res["tables"][0]["columns"][0]), "50.00")


class ExperimentTablesTest(absltest.TestCase):
  """The experiments' tables carry the per-seed values they were given."""

  def test_pmc(self):
    from jaxlab.experiments import pmc  # pylint: disable=g-import-not-at-top
    rec = lambda u, f: {"utility": u, "recall_forget": f, "uq": 50.0}  # pylint: disable=g-long-lambda
    out = {"per_seed": {"seeds": [3, 4], "methods": {
        "original": [rec(97.0, 0.9), rec(98.0, 0.95)],
        "pmc": [rec(70.0, 0.0), rec(72.0, 0.1)],
        "gd": [rec(40.0, 0.05), rec(41.0, 0.0)]}}}
    tables, comps = pmc.results_tables(out)
    res = results.build("pmc", tables=tables, comparisons=comps)
    t = report.find_table(res, "unlearning")
    cells = {r["label"]: r["cells"] for r in t["rows"]}
    self.assertEqual(cells["PMC"]["utility"], _cell([3, 4], [70.0, 72.0]))
    scale = {c["key"]: c["scale"] for c in t["columns"]}
    self.assertEqual((scale["utility"], scale["recall_forget"]), (1, 100))
    self.assertIn(("utility", "PMC", "GD"),
                  [(c["column"], c["a"], c["b"]) for c in res["comparisons"]])
    self.assertIn("prefilled with the answer's first 3 words",
                  {c["key"]: c["label"] for c in t["columns"]}["leak_prefill"])

  def test_rope_extension(self):
    from jaxlab.experiments import rope_extension  # pylint: disable=g-import-not-at-top
    methods = ["default", "yarn", "mrope_uni", "mrope_pro"]
    per_seed = []
    for seed in (0, 1):
      metrics = {k: {m: [seed + i + 0.1 * j for j in range(5)]
                     for i, m in enumerate(methods)}
                 for k in ("passkey", "passkey_token_acc", "perplexity")}
      per_seed.append({"seed": seed, "methods": methods,
                       "lengths": [64, 128, 256, 512, 1024],
                       "metrics": metrics, "learning_curve": []})
    tables, comps = rope_extension.results_tables(per_seed, 64)
    res = results.build("rope", tables=tables, comparisons=comps)
    t = report.find_table(res, "summary")
    self.assertEqual([c["key"] for c in t["columns"]],
                     ["pk4", "pk8", "pk16", "ppl8", "ppl16"])
    cells = {r["label"]: r["cells"] for r in t["rows"]}
    # mrope_pro is method index 3; 16x is length index 4.
    self.assertEqual(cells["MrRoPE-Pro"]["ppl16"]["values"], [3.4, 4.4])
    self.assertEqual(cells["MrRoPE-Pro"]["ppl16"]["seeds"], [0, 1])
    pairs = [(c["column"], c["a"], c["b"]) for c in res["comparisons"]]
    self.assertIn(("pk16", "MrRoPE-Pro", "YaRN (HF ramp)"), pairs)
    self.assertIn(("ppl8", "MrRoPE-Uni", "none"), pairs)


class RepoDocsTest(absltest.TestCase):

  def test_committed_tables_are_generated(self):
    """Fails when a table in README.md / docs/papers differs from its data.

    Fix: `python -m jaxlab.experiments.report` (never edit a generated table).
    """
    self.assertEqual(report.update_docs(report.REPO, check=True), [])


if __name__ == "__main__":
  absltest.main()
