"""Tests of StreamingThinker decoding: dual cache = full masked forward; clock."""

import functools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.synthetic import running_sum as rs
from jaxlab.decoding import streaming as sd
from jaxlab.objectives import streaming as st
from jaxlab.testing import tiny_models

FULL_LEN = 64  # one compiled full forward for every check


@functools.partial(jax.jit, static_argnums=())
def _full_forward(model, ids, positions, allowed):
  return model.forward(ids[None], positions=positions[None],
                       allowed_mask=allowed[None, None]).logits[0]


def _full_logits(model, src_tokens, tgt_tokens, src_lens, tgt_lens, *,
                 streaming=True):
  """Logits of [sources][targets] padded to FULL_LEN under the full mask."""
  n = len(src_tokens) + len(tgt_tokens)
  ids = np.zeros(FULL_LEN, np.int32)
  ids[:n] = src_tokens + tgt_tokens
  if streaming:
    mask = st.streaming_mask(src_lens, tgt_lens, FULL_LEN)
    pos = st.streaming_positions(src_lens, tgt_lens, FULL_LEN)
  else:
    mask = st.causal_mask(n, FULL_LEN)
    pos = jnp.arange(FULL_LEN, dtype=jnp.int32)
  return np.asarray(_full_forward(model, jnp.asarray(ids), pos, mask))


def _logit_atol(model, logits) -> float:
  """Float32 rounding bound for two programs computing the same logits.

  The dual-cache decode and the full forward sum in different orders: each
  of the ~6 reductions per layer (q/k/v, scores, weighted sum, output, MLP
  up/down, norms; plus the LM head) of length <= K adds ~sqrt(K) * eps32 of
  the logits' scale, twice that for a margin. Here (2 layers, K = 64, logits
  up to ~5.5) that is ~1.4e-4; a wrong mask, position or cache entry moves
  logits by > 1e-2.
  """
  cfg = model.cfg
  k = max(cfg.dim, cfg.mlp_dim, FULL_LEN)
  stages = 6 * cfg.num_layers + 1
  eps = float(np.finfo(np.float32).eps)
  return 2 * stages * np.sqrt(k) * eps * float(np.abs(logits).max())


class DualCacheTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.model = tiny_models.tiny_decoder(0)
    story = rs.Story(values=[3, 4, -2, 1], totals=[3, 7, 5, 6])
    cls.ex = rs.encode_example(rs.to_example(story, "D2"))
    cls.reasoning = [t for seg in cls.ex.target[1:] for t in seg]
    cls.kw = dict(seed_tokens=rs.SEED_IDS, separator_ids=rs.SEPARATOR_IDS,
                  stop_ids=rs.STOP_IDS)

  def _check_against_full(self, res):
    src = [t for seg in self.ex.source[:len(res.src_lens)] for t in seg]
    tgt = list(rs.SEED_IDS) + res.tokens
    full = _full_logits(self.model, src, tgt, res.src_lens, res.tgt_lens)
    s, n = len(src), len(rs.SEED_IDS)
    # Row of fed target token r predicts target token r + 1.
    rows = full[s + n - 1:s + n - 1 + len(res.tokens)]
    np.testing.assert_allclose(res.logits, rows, rtol=0,
                               atol=_logit_atol(self.model, rows))
    return rows

  def test_forced_reference_reasoning_equals_full_masked_forward(self):
    res = sd.decode(self.model, self.ex.source, max_new_tokens=64,
                    force_tokens=self.reasoning, **self.kw)
    self.assertEqual(res.tokens, self.reasoning)
    # Every segment was read, each triggered by its boundary token; the
    # last sentence's unit and the final segment form one segment.
    self.assertEqual(res.src_lens, self.ex.src_lens)
    tl = self.ex.tgt_lens
    self.assertEqual(res.tgt_lens, tl[:-2] + [tl[-2] + tl[-1]])
    self.assertEqual([e for e in res.trace if e[0] == "read"],
                     [("read", i) for i in range(len(self.ex.source))])
    self._check_against_full(res)

  def test_greedy_tokens_equal_full_forward_argmax(self):
    res = sd.decode(self.model, self.ex.source, max_new_tokens=24, **self.kw)
    rows = self._check_against_full(res)
    np.testing.assert_array_equal(res.tokens, rows.argmax(-1))

  def test_interleaved_equals_causal_forward_of_interleaved_sequence(self):
    res = sd.decode(self.model, self.ex.source, max_new_tokens=64,
                    force_tokens=self.reasoning, mode="interleaved", **self.kw)
    target = [list(rs.SEED_IDS)] + [list(t) for t in self.ex.target[1:]]
    seq, is_tgt = st.interleave(self.ex.source, target)
    full = _full_logits(self.model, seq, [], [len(seq)], [], streaming=False)
    # Rows predicting each generated (non-seed) target token.
    idx = [i - 1 for i, f in enumerate(is_tgt) if f][len(rs.SEED_IDS):]
    np.testing.assert_allclose(res.logits, full[idx], rtol=0,
                               atol=_logit_atol(self.model, full[idx]))

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "mode must be one of"):
      sd.decode(self.model, self.ex.source, max_new_tokens=4, mode="x",
                **self.kw)
    with self.assertRaisesRegex(ValueError, "non-empty token lists"):
      sd.decode(self.model, [[1], []], max_new_tokens=4, **self.kw)
    with self.assertRaisesRegex(ValueError, "max_new_tokens must be >= 1"):
      sd.decode(self.model, self.ex.source, max_new_tokens=0, **self.kw)


class ArrivalClockTest(absltest.TestCase):
  # src_lens [2, 3, 3]: at 1 token per tick the segments are complete at
  # ticks 2, 5, 8.
  TRACE = [("read", 0), ("seed", 1), ("seed", 2), ("read", 1), ("seed", 3),
           ("write", 10), ("write", 11), ("read", 2), ("write", 12),
           ("write", 13)]

  def test_streaming_trace_free_reads(self):
    # Writes wait for segment 1 (tick 5): emitted at 6, 7; segment 2 ready at
    # 8: emitted at 9, 10. Answer = write 3 at tick 10, input ends at 8.
    for concurrent in (True, False):
      c = sd.arrival_clock(self.TRACE, [2, 3, 3], tokens_per_tick=1.0,
                           concurrent_reads=concurrent, answer_write=3)
      self.assertEqual(c.ttft_tokens, 5)
      self.assertEqual(c.first_token_tick, 6.0)
      self.assertEqual(c.answer_tick, 10.0)
      self.assertEqual(c.delay_ticks, 2.0)

  def test_read_cost_overlaps_only_when_concurrent(self):
    # 1 tick per read token. Concurrent reader: done at 4, 8, 11; writes at
    # 9, 10, then 12, 13 -> delay 5. One worker: reads end at 4, 8, then
    # the third starts after write 10: 13; writes 14, 15 -> delay 7.
    conc = sd.arrival_clock(self.TRACE, [2, 3, 3], tokens_per_tick=1.0,
                            concurrent_reads=True, read_ticks_per_token=1.0)
    ser = sd.arrival_clock(self.TRACE, [2, 3, 3], tokens_per_tick=1.0,
                           concurrent_reads=False, read_ticks_per_token=1.0)
    self.assertEqual((conc.first_token_tick, conc.answer_tick,
                      conc.delay_ticks), (9.0, 13.0, 5.0))
    self.assertEqual((ser.first_token_tick, ser.answer_tick,
                      ser.delay_ticks), (9.0, 15.0, 7.0))

  def test_batch_waits_for_the_whole_input(self):
    trace = [("read", 2), ("seed", 1), ("write", 5), ("write", 6),
             ("write", 7)]
    c = sd.arrival_clock(trace, [2, 3, 3], tokens_per_tick=2.0,
                         concurrent_reads=False, answer_write=1)
    # Input ends at 8 / 2 = 4 ticks; writes at 5, 6.
    self.assertEqual((c.ttft_tokens, c.answer_tick, c.delay_ticks),
                     (8, 6.0, 2.0))

  def test_delay_key_names_the_rate(self):
    self.assertEqual(sd.delay_key(0.25), "delay_0p25")
    self.assertEqual(sd.delay_key(1.0), "delay_1")
    self.assertEqual(sd.delay_key(2.5), "delay_2p5")

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "tokens_per_tick must be > 0"):
      sd.arrival_clock(self.TRACE, [2, 3, 3], tokens_per_tick=0,
                       concurrent_reads=True)
    with self.assertRaisesRegex(ValueError, "reads segment 2 but"):
      sd.arrival_clock(self.TRACE, [2, 3], tokens_per_tick=1,
                       concurrent_reads=True)
    with self.assertRaisesRegex(ValueError, "no write event"):
      sd.arrival_clock([("read", 0)], [2], tokens_per_tick=1,
                       concurrent_reads=True)


if __name__ == "__main__":
  absltest.main()
