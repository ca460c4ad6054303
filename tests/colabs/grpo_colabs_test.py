"""Executes the Trust-GRPO and chart-to-code colabs on their test presets.

Trust-GRPO runs `tiny,smoke` (the tiny variants, 3 RL steps, a 40-step
learned TRM: the same cells, table rows and judge values, in seconds);
chart-to-code's `tiny` (shrunk further by the notebook) is already that
small.
"""

from absl.testing import absltest

from jaxlab.testing import notebooks

def _run(name, preset="tiny"):
  return notebooks.run_notebook(name, preset=preset)


class GrpoColabsTest(absltest.TestCase):

  def test_trust_grpo_colab(self):
    out = _run("trust_grpo.ipynb", "tiny,smoke")
    self.assertIn("gamma: 0.5488", out)             # exp(0.2 - 0.8)
    # 1 + exp(-0.6) * 0.3 * 0.2 and 0 + exp(-0.6) * 0.3 * 0.8.
    self.assertIn("[1.0329 1.0329 0.1317 0.1317]", out)
    self.assertIn("| outcome |", out)
    self.assertIn("| trust |", out)
    # The judge's hand values: hackable question HACK 0.9, every v 0.1.
    self.assertIn("judge (hackable question): [0.9 0.1 0.1 0.1 0.1 0.1]",
                  out)
    self.assertIn("learned TRM: mean abs. error vs judge", out)

  def test_chart_to_code_colab(self):
    out = _run("chart_to_code.ipynb")
    self.assertIn("render ok: True (64, 64, 3)", out)
    self.assertIn("hostile ok: False", out)
    # Heights 3,5,4 vs 3,5,2 -> 2 of 3 within 5 %; 'cast' vs 'cost' -> 0.75.
    self.assertIn("'data': 0.667", out)
    self.assertIn("'text': 0.75", out)
    self.assertIn("| text_vis_exec |", out)


if __name__ == "__main__":
  absltest.main()
