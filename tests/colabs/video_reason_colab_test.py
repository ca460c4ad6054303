"""Executes the VideoReasonBench colab (smoke settings)."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class VideoReasonColabTest(absltest.TestCase):

  def test_video_reason_colab(self):
    out = notebooks.run_notebook("video_reason.ipynb", preset="tiny,smoke")
    self.assertIn("frames (7, 32, 32, 3) uint8 | file "
                  "videos/hrd/state3_op5_start.mp4", out)
    self.assertIn("Operation 5: ", out)
    self.assertIn("oracle: accuracy 1.000 over 144 questions (0 malformed",
                  out)
    self.assertIn("malformed: 2 accuracy: 0.333", out)
    self.assertIn("| oracle | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 |",
                  out)


if __name__ == "__main__":
  absltest.main()
