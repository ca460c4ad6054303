"""Tests of the StreamingThinker objective: mask, positions, format, loss."""

from absl.testing import absltest
import chex
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.data.synthetic import running_sum as rs
from jaxlab.objectives import streaming as st
from jaxlab.testing import tiny_models

# src_lens [2, 1, 2] (S = 5), tgt_lens [2, 2, 1] (T = 5), one padding row.
# Before the shift target rows 5-6 see sources 0-1, rows 7-8 sources 0-2,
# row 9 all; the shift gives each target row the source columns of the row
# below it (row 9, the last, keeps its own).
HAND_MASK = np.array([
    # 0  1  2  3  4  5  6  7  8  9  10
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
    [1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0],   # shifted from row 6: sources 0-1
    [1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0],   # boundary of segment 0: sees src 2
    [1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0],
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0],   # boundary of segment 1: all sources
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],   # padding sees nothing
], bool)


class MaskAndPositionsTest(absltest.TestCase):

  def test_mask_matches_hand_built_example(self):
    np.testing.assert_array_equal(
        np.asarray(st.streaming_mask([2, 1, 2], [2, 2, 1], 11)), HAND_MASK)

  def test_positions_restart_for_targets(self):
    np.testing.assert_array_equal(
        st.streaming_positions([2, 1, 2], [2, 2, 1], 11),
        [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0])
    np.testing.assert_array_equal(
        st.streaming_positions([2, 1, 2], [2, 2, 1], 11, contiguous=True),
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0])

  def test_final_segment_beyond_sources_sees_everything(self):
    # Three target segments for two source segments: the third sees all
    # (and, by the shift, so does the second's boundary row; the first's
    # boundary sees source 1).
    m = np.asarray(st.streaming_mask([1, 1], [1, 1, 1], 5))
    np.testing.assert_array_equal(m[2:], [[1, 1, 1, 0, 0],
                                          [1, 1, 1, 1, 0],
                                          [1, 1, 1, 1, 1]])

  def test_bad_inputs_raise_one_clear_error(self):
    with self.assertRaisesRegex(ValueError, "exceeds total_len=4"):
      st.streaming_mask([2, 1], [2], 4)
    with self.assertRaisesRegex(ValueError, "must be >= 0"):
      st.streaming_positions([2, -1], [1], 8)
    with self.assertRaisesRegex(ValueError, "src_lens is empty"):
      st.streaming_mask([], [1], 4)
    with self.assertRaisesRegex(ValueError, "depth must be one of"):
      st.final_segment("D4", answer=["1"])
    with self.assertRaisesRegex(ValueError, "one unit per sentence"):
      st.format_example(instruct=["i"], question=["q"], sentences=[["a"]],
                        question_unit=["u"], units=[], final=["f"])
    with self.assertRaisesRegex(ValueError, "layout must be one of"):
      st.encode_layout(st.StreamingExample([[1]], [[2]]), "stream", 4)
    with self.assertRaisesRegex(ValueError, "raise the task's max_len"):
      st.encode_layout(st.StreamingExample([[1, 2]], [[2, 3]]), "batch", 3)


class FormatTest(absltest.TestCase):

  def test_segmenter_keeps_boundaries(self):
    self.assertEqual(st.segment_text("Q?<EOQ>a b<EOS> c<EOS>tail"),
                     ["Q?<EOQ>", "a b<EOS>", " c<EOS>", "tail"])
    self.assertEqual(st.segment_tokens([1, 9, 2, 3, 9], [9]),
                     [[1, 9], [2, 3, 9]])

  def test_depth_variants(self):
    kw = dict(answer=["5"], connect=["C"], deep_reasoning=["r"],
              reflection=[st.EOR, "w", st.EOF], conclusion=["t", st.EOA],
              think_end=["</think>"], end=["E"])
    self.assertEqual(st.final_segment("D1", **kw), ["</think>", "5", "E"])
    self.assertEqual(st.final_segment("D2", **kw),
                     ["C", "r", "</think>", "5", "E"])
    self.assertEqual(st.final_segment("D3", **kw),
                     ["C", "r", st.EOR, "w", st.EOF, "t", st.EOA,
                      "</think>", "5", "E"])

  def test_running_sum_story_layout(self):
    story = rs.Story(values=[3, 4, -2], totals=[3, 7, 5])
    ex = rs.to_example(story, "D2")
    self.assertEqual(ex.source, [
        ["<instr>", "<SEP>"], ["total", "?", "<EOQ>"], ["has", "3", "<EOS>"],
        ["gets", "4", "<EOS>"], ["loses", "2", "<EOS>", "<|im_end|>"]])
    self.assertEqual(ex.target, [
        ["<assistant>", "<think>", "<SEP>"], ["track", "<EOQ>"],
        ["=", "3", "<EOT>"], ["=", "7", "<EOT>"], ["=", "5", "<EOT>"],
        ["combine", "3", "+", "4", "-", "2", "=", "5", "</think>", "5",
         "<|im_end|>"]])
    tokens, is_tgt = st.interleave(ex.source, ex.target)
    self.assertEqual(tokens[:7], ["<instr>", "<SEP>", "<assistant>",
                                  "<think>", "<SEP>", "total", "?"])
    self.assertEqual(sum(is_tgt), sum(ex.tgt_lens))

  def test_layouts_label_exactly_the_target_tokens(self):
    ex = rs.encode_example(rs.to_example(
        rs.Story(values=[3, 4], totals=[3, 7]), "D1"))
    s, t = sum(ex.src_lens), sum(ex.tgt_lens)
    for layout in st.LAYOUTS:
      arr = st.encode_layout(ex, layout, s + t + 3)
      self.assertEqual(arr["loss_mask"].sum(), t, layout)
      labelled = arr["targets"][arr["loss_mask"] > 0]
      # The labels, in order, are the target tokens.
      np.testing.assert_array_equal(
          labelled, [x for seg in ex.target for x in seg])
    stream = st.encode_layout(ex, "streaming", s + t + 3)
    batch = st.encode_layout(ex, "batch", s + t + 3)
    np.testing.assert_array_equal(stream["inputs"], batch["inputs"])
    self.assertEqual(int(stream["positions"][s]), 0)
    self.assertEqual(int(batch["positions"][s]), s)


class LossAndCausalityTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = tiny_models.tiny_decoder(0)
    story = rs.Story(values=[3, 4, -2, 1], totals=[3, 7, 5, 6])
    cls.ex = rs.encode_example(rs.to_example(story, "D2"))
    cls.total = sum(cls.ex.src_lens) + sum(cls.ex.tgt_lens) + 2
    cls.arr = st.encode_layout(cls.ex, "streaming", cls.total)

  def _logits(self, inputs, arr):
    return np.asarray(self.model.forward(
        jnp.asarray(inputs)[None], positions=jnp.asarray(arr["positions"])[
            None], allowed_mask=jnp.asarray(arr["allowed"])[None, None]
    ).logits[0])

  def test_future_sentences_do_not_change_earlier_targets(self):
    # Perturb source segment j (the third sentence); target segments i <= j-2
    # see sources 0..i+1 at most, and segment j-1 sees j only at its last row.
    j = 4
    ends = np.cumsum(self.ex.src_lens)
    perturbed = self.arr["inputs"].copy()
    perturbed[ends[j - 1]:ends[j] - 1] = rs.TOKEN_ID["9"]
    self.assertGreater(np.sum(perturbed != self.arr["inputs"]), 0)
    base = self._logits(self.arr["inputs"], self.arr)
    pert = self._logits(perturbed, self.arr)
    s = sum(self.ex.src_lens)
    unchanged_end = s + sum(self.ex.tgt_lens[:j]) - 1  # before j-1's boundary
    np.testing.assert_allclose(pert[s:unchanged_end], base[s:unchanged_end],
                               atol=1e-6)
    # The boundary row of segment j-1 and later rows do see the change, and
    # so do the same rows under the causal (batch) mask.
    self.assertGreater(np.abs(pert[unchanged_end] - base[unchanged_end]).max(),
                       1e-4)
    causal = st.encode_layout(self.ex, "batch", self.total)
    cb = self._logits(self.arr["inputs"], causal)
    cp = self._logits(perturbed, causal)
    self.assertGreater(np.abs(cb[s:unchanged_end] - cp[s:unchanged_end]).max(),
                       1e-4)

  def test_loss_is_target_token_mean_nll(self):
    batch = {k: jnp.asarray(v)[None] for k, v in self.arr.items()}
    loss, metrics = st.streaming_lm_loss(self.model, batch, rng=None)
    logits = self._logits(self.arr["inputs"], self.arr)
    nll = optax.softmax_cross_entropy_with_integer_labels(
        logits, self.arr["targets"])
    m = self.arr["loss_mask"]
    chex.assert_trees_all_close(float(loss), float((nll * m).sum() / m.sum()),
                                rtol=1e-5)
    self.assertEqual(float(metrics["tokens"]), sum(self.ex.tgt_lens))


if __name__ == "__main__":
  absltest.main()
