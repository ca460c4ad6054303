"""Executes the B-calibration colab on the smoke preset."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class CalibrationColabTest(absltest.TestCase):

  def test_calibration_colab(self):
    out = notebooks.run_notebook("calibration.ipynb", preset="tiny,smoke")
    # smECE of seeded synthetic predictors (equal to relplot.smECE, see
    # tests/evals/calibration_test.py).
    self.assertIn("calibrated      smECE 0.025 (sigma* 0.025)", out)
    self.assertIn("overconfident   smECE 0.253", out)
    self.assertIn("underconfident  smECE 0.167", out)
    self.assertIn("B(answers): ['62', '62', '25', '62', '25', '62'] -> "
                  "(confidence, plurality): (0.6666666666666666, '62')", out)
    for label in ("base (direct)", "RL (GRPO → mode)", "DPO (mode ≻ other)",
                  "base + CoT prompt"):
      self.assertIn(f"| {label} |", out)
    self.assertRegex(out, r"cot: smECE \d\.\d{3}  confidence - accuracy")


if __name__ == "__main__":
  absltest.main()
