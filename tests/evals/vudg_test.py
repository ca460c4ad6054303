"""VUDG harness: letter extraction, D-Avg and protocol averages against
hand-computed examples; malformed replies counted; errors name the field."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from jaxlab.data.synthetic import video_domains as vd
from jaxlab.evals import vudg

_OPTS = ("red", "walk left", "blue", "ball", "jump", "box")


def _q(domain: str, answer: str, qtype: int = 1) -> vd.MCQ:
  return vd.MCQ(qa_num=0, video="v", domain=domain,
                question=vd.format_question("Q?", _OPTS), answer=answer,
                question_type=qtype, stem="Q?", options=_OPTS)


class ExtractLetterTest(parameterized.TestCase):

  @parameterized.parameters(
      ("B", "B"), (" c. red", None), ("C. blue", "C"), ("(D) ball", "D"),
      ("D) ball", "D"), ("I think (E) is right", "E"),
      ("The answer is F", "F"), ("Answer: b", "B"), ("blue", "C"),
      ("Walk Left.", "B"), ("green", None), ("", None), ("G", None),
      ("none of them", None))
  def test_hand_examples(self, reply, want):
    self.assertEqual(vudg.extract_letter(reply, _OPTS), want)

  def test_strict_is_the_official_rule_and_option_count_limits(self):
    self.assertEqual(vudg.extract_letter(" b ", _OPTS, strict=True), "B")
    self.assertIsNone(vudg.extract_letter("(B)", _OPTS, strict=True))
    self.assertIsNone(vudg.extract_letter("E", num_options=4))
    self.assertIsNone(vudg.extract_letter("blue", _OPTS,
                                          match_option_text=False))
    with self.assertRaisesRegex(TypeError, "reply must be a string"):
      vudg.extract_letter(None, _OPTS)


class ScoreTest(absltest.TestCase):

  def test_d_avg_per_shift_type_and_malformed_by_hand(self):
    qs = [_q("night", "A", 1), _q("night", "B", 2), _q("night", "C", 4),
          _q("foggy", "A", 1), _q("cartoon", "D", 4)]
    replies = ["A", "red", "(C)", "gibberish", "D"]
    r = vudg.score(qs, replies)
    # night 2/3 (B answered "red" = A: wrong), foggy 0/1 (malformed),
    # cartoon 1/1.
    self.assertEqual(r.num_malformed, 1)
    self.assertEqual(r.correct, (True, False, True, False, True))
    self.assertAlmostEqual(r.by_domain["night"], 2 / 3)
    self.assertAlmostEqual(r.d_avg, (2 / 3 + 0 + 1) / 3)       # 0.5556
    self.assertAlmostEqual(r.overall, 3 / 5)
    self.assertAlmostEqual(r.by_shift_type["environment"], (2 / 3 + 0) / 2)
    self.assertAlmostEqual(r.by_shift_type["style"], 1.0)
    self.assertNotIn("viewpoint", r.by_shift_type)
    self.assertEqual(r.by_question_type, {1: 0.5, 2: 0.0, 4: 1.0})
    with self.assertRaisesRegex(ValueError, "4 replies for 5 questions"):
      vudg.score(qs, replies[:4])

  def test_baselines_and_probes(self):
    qs = [_q("night", "B"), _q("night", "A")]
    self.assertEqual(vudg.longest_option(qs), ["B", "B"])   # "walk left"
    self.assertAlmostEqual(vudg.score(qs, vudg.longest_option(qs)).overall,
                           0.5)
    self.assertAlmostEqual(vudg.chance(qs), 1 / 6)
    frames = np.arange(2 * 3 * 1 * 1 * 1, dtype=np.float32).reshape(
        2, 3, 1, 1, 1)
    np.testing.assert_array_equal(
        vudg.probe_frames(frames, "single_frame")[:, :, 0, 0, 0],
        [[1, 1, 1], [4, 4, 4]])
    self.assertEqual(vudg.probe_frames(frames, "text_only").sum(), 0)
    with self.assertRaisesRegex(ValueError, "probe='audio'"):
      vudg.probe_frames(frames, "audio")


class ProtocolTest(absltest.TestCase):

  def test_splits_and_averages_by_hand(self):
    doms = ("cartoon", "night", "foggy")
    lodo = vudg.protocol_splits("multi_source", doms)
    self.assertEqual([(s.train, s.test) for s in lodo],
                     [(("night", "foggy"), ("cartoon",)),
                      (("cartoon", "foggy"), ("night",)),
                      (("cartoon", "night"), ("foggy",))])
    single = vudg.protocol_splits("single_source", doms, only=["night"])
    self.assertEqual([(s.train, s.test) for s in single],
                     [(("night",), ("cartoon", "foggy"))])
    shift = vudg.protocol_splits("single_source_shift", doms)
    self.assertEqual([(s.train, s.test) for s in shift],
                     [(("cartoon",), ("night", "foggy")),
                      (("night", "foggy"), ("cartoon",))])
    # A fake "model": accuracy 1 on a domain it trained on, else 0.5 on
    # night and 0 elsewhere: Avg_s = mean over sources of the mean over
    # the other domains.
    def eval_fn(trained, test):
      qs, replies = [], []
      for d in test:
        good = d in trained
        for k in range(2):
          qs.append(_q(d, "A"))
          ok = good or (d == "night" and k == 0)
          replies.append("A" if ok else "B")
      return vudg.score(qs, replies)

    res = vudg.run_protocol("single_source", doms, lambda tr: tr, eval_fn)
    # source cartoon: night .5, foggy 0 -> .25; night: cartoon 0, foggy 0
    # -> 0; foggy: cartoon 0, night .5 -> .25. Avg_s = 1/6.
    self.assertAlmostEqual(res.average, 1 / 6)
    full = vudg.run_protocol("full", doms, lambda tr: tr, eval_fn)
    self.assertAlmostEqual(full.average, 1.0)
    self.assertAlmostEqual(res.gap_to(full.average), 5 / 6)
    lodo_res = vudg.run_protocol("multi_source", doms, lambda tr: tr,
                                 eval_fn)
    self.assertAlmostEqual(lodo_res.average, (0 + 0.5 + 0) / 3)

  def test_unknown_names_are_one_clear_error(self):
    with self.assertRaisesRegex(ValueError, "unknown domain 'sunny'"):
      vudg.protocol_splits("full", ["sunny"])
    with self.assertRaisesRegex(ValueError, "protocol='lodo'"):
      vudg.protocol_splits("lodo", ["night"])
    with self.assertRaisesRegex(ValueError, "unknown shift type 'weather'"):
      vudg.protocol_splits("single_source_shift", ["night"],
                           only=["weather"])


if __name__ == "__main__":
  absltest.main()
