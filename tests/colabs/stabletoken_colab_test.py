"""Executes the StableToken colab (smoke settings)."""

from absl.testing import absltest

from jaxlab.data import audio
from jaxlab.testing import notebooks


class StableTokenColabTest(absltest.TestCase):

  def test_stabletoken_colab(self):
    out = notebooks.run_notebook("stabletoken.ipynb", preset="tiny,smoke")
    # Hand-computed: codes 101, 110, 001, 100, 111 (little-endian) -> 5, 3,
    # 4, 1, 7; bitwise majority 101 -> 5.
    self.assertIn("branch tokens: [5, 3, 4, 1, 7] | voted token: 5", out)
    self.assertIn("branches agreeing with the vote: 1 of 5", out)
    self.assertRegex(out, r"pink     target SNR 22 dB, measured 22\.00 dB")
    self.assertIn("log-mel features: (1, 53, 40)", out)
    self.assertIn("| StableToken (full) |", out)  # table from results.json
    # The smoke preset's one variant over every evaluation perturbation; the
    # table's cells recomputed from the run's per-seed values.
    self.assertIn(f"variants: full | perturbations: "
                  f"{len(audio.EVAL_PERTURBATIONS)}", out)
    self.assertIn("average UED = mean over perturbations: True | rows = "
                  "per-variant means: True", out)


if __name__ == "__main__":
  absltest.main()
