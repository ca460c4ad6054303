"""Executes the controller colab on the smoke preset."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class ControllerColabTest(absltest.TestCase):

  def test_controller_colab(self):
    out = notebooks.run_notebook("controller.ipynb", preset="smoke")
    # Simulator hand cases (bubble sort with early exit; 21 mod 10).
    self.assertIn("bubble sort [3, 1, 2] -> [1, 2, 3]", out)
    self.assertIn("trace: [('COMPARE', 0, 1), ('BRANCH', 0, 1), "
                  "('COMPARE', 1, 2), ('BRANCH', 1, 2), ('COMPARE', 0, 1)]",
                  out)
    self.assertIn("sum mod 10 of [7, 5, 9] -> 1", out)
    # τ(300) = sqrt(0.1), τ(600) = τ_min.
    self.assertIn("step  300: tau = 0.316", out)
    self.assertIn("step  900: tau = 0.100", out)
    self.assertIn("sum_mod10 gumbel   seed 0: acc_train=", out)
    self.assertIn("['accuracy', 'controller', 'flops']", out)


if __name__ == "__main__":
  absltest.main()
