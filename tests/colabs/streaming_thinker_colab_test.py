"""Executes the StreamingThinker colab on the smoke preset."""

from absl.testing import absltest

from jaxlab.testing import notebooks


class StreamingThinkerColabTest(absltest.TestCase):

  def test_streaming_thinker_colab(self):
    out = notebooks.run_notebook("streaming_thinker.ipynb", preset="smoke")
    # The hand-checked mask of tests/objectives/streaming_test.py.
    self.assertIn("1 1 1 0 0 1 1 0 0 0 0", out)
    self.assertIn("1 1 1 1 1 1 1 1 1 0 0", out)
    self.assertIn("SPE positions: [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0]", out)
    self.assertIn("target: <assistant> <think> <SEP> | track <EOQ> | = 3 <EOT>",
                  out)
    # The clock example of tests/decoding/streaming_test.py.
    self.assertIn("concurrent=True: TTFT 5 tokens, Delay 5.0 ticks", out)
    self.assertIn("concurrent=False: TTFT 5 tokens, Delay 7.0 ticks", out)
    for method in ("streaming", "batch", "interleaved"):
      self.assertIn(f"seed 0 {method}", out)
    self.assertIn("| want", out)


if __name__ == "__main__":
  absltest.main()
