"""Mini-VUDG: determinism under a seed, answers from the script, disjoint
train/test scripts, the 11 domain transforms, the VUDG file layout (written
by the test) round-trips, bad rows are one clear error."""

import json
import os
import tempfile

from absl.testing import absltest
import numpy as np

from jaxlab.data.synthetic import video_domains as vd


class VideoDomainsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.data = vd.generate("test", clips_per_domain=2, seed=5, num_frames=6,
                           size=16)

  def test_same_seed_same_clips_questions_answers(self):
    again = vd.generate("test", clips_per_domain=2, seed=5, num_frames=6,
                        size=16)
    self.assertEqual(again.questions, self.data.questions)
    self.assertEqual(list(again.videos), list(self.data.videos))
    for v in self.data.videos:
      np.testing.assert_array_equal(again.videos[v], self.data.videos[v])
    # A clip does not depend on which other domains are generated.
    night = vd.generate("test", domains=["night"], clips_per_domain=2,
                        seed=5, num_frames=6, size=16)
    np.testing.assert_array_equal(night.videos["test/night/00001.npz"],
                                  self.data.videos["test/night/00001.npz"])
    other = vd.generate("test", domains=["night"], clips_per_domain=2,
                        seed=6, num_frames=6, size=16)
    self.assertNotEqual(other.questions, night.questions)

  def test_answers_follow_the_script_and_options_are_valid(self):
    self.assertLen(self.data.questions, 11 * 2 * 4)
    self.assertEqual(self.data.domains(), vd.ALL_DOMAINS)
    for q in self.data.questions:
      s = self.data.scripts[q.video]
      want = {1: s.actions[0], 2: s.colour, 3: s.shape, 4: s.actions[1]}
      self.assertEqual(q.answer_text, want[q.question_type])
      self.assertLen(set(q.options), 6)
      self.assertEqual(vd.parse_question(q.question), (q.stem, q.options))
      if q.question_type in (1, 4):   # the clip's other action is excluded
        other = s.actions[1 if q.question_type == 1 else 0]
        self.assertNotIn(other, q.options)
    train = vd.generate("train", clips_per_domain=2, seed=5, num_frames=6,
                        size=16)
    self.assertNotEqual([train.scripts[v] for v in train.videos],
                        [self.data.scripts[v] for v in self.data.videos])

  def test_domains_transform_the_same_script_differently(self):
    script = vd.sample_script(np.random.default_rng(0))
    clean, _, _ = vd.render_clean(script, 6, 16)
    outs = {d: vd.render(script, d, num_frames=6, size=16,
                         rng=np.random.default_rng(1))
            for d in vd.ALL_DOMAINS}
    for d, x in outs.items():
      self.assertEqual(x.shape, (6, 16, 16, 3))
      self.assertBetween(float(x.min()), 0.0, 1.0)
      self.assertGreater(float(np.abs(x - clean).mean()), 0.005, d)
    # Hand-checkable transforms: surveillance is gray, night is darker.
    s = outs["surveillance"]
    np.testing.assert_allclose(s[..., 0], s[..., 1])
    self.assertLess(outs["night"].mean(), clean.mean() - 0.2)
    with self.assertRaisesRegex(ValueError, "unknown domain 'sunny'"):
      vd.render(script, "sunny", num_frames=6, size=16,
                rng=np.random.default_rng(0))

  def test_real_layout_json_round_trips_and_bad_rows_are_errors(self):
    with tempfile.TemporaryDirectory() as root:
      # A file in VUDG's test_multi.json schema, written by hand.
      os.makedirs(os.path.join(root, "videos"))
      frames = (np.arange(3 * 4 * 4 * 3) % 256).astype(np.uint8).reshape(
          3, 4, 4, 3)
      np.savez(os.path.join(root, "videos", "a.npz"), frames=frames)
      rows = [{"QA_num": 7, "video": "videos/a.npz", "domain": "snowy",
               "question": "What is the man holding?\n(A) a cup\n(B) a "
                           "phone\n(C) a book\n(D) a pen\n(E) a bag\n"
                           "(F) nothing", "answer": "C",
               "question_type": 3}]
      path = os.path.join(root, "test_multi.json")
      with open(path, "w") as f:
        json.dump(rows, f)
      got = vd.load(path, num_frames=2)
      q = got.questions[0]
      self.assertEqual((q.qa_num, q.domain, q.answer, q.question_type,
                        q.stem), (7, "snowy", "C", 3,
                                  "What is the man holding?"))
      self.assertEqual(q.options, ("a cup", "a phone", "a book", "a pen",
                                   "a bag", "nothing"))
      self.assertEqual(q.answer_text, "a book")
      np.testing.assert_allclose(got.frames("videos/a.npz"),
                                 frames[[0, 2]] / 255.0)
      # Our generated set exported in the layout and read back.
      out = vd.export(self.data.select(["night", "cartoon"]),
                      os.path.join(root, "mini"))
      back = vd.load(out)
      self.assertEqual(back.questions,
                       self.data.select(["night", "cartoon"]).questions)
      for v, x in back.videos.items():
        np.testing.assert_allclose(x, self.data.videos[v], atol=0.5 / 255)
      # Bad rows: one error naming row and field.
      for bad, regex in [({"domain": "sunny"}, "row 0: unknown domain "
                                               "'sunny'"),
                         ({"answer": "G"}, "row 0: answer 'G' is not one of"),
                         ({"question_type": 9}, "row 0: question_type 9")]:
        with open(path, "w") as f:
          json.dump([{**rows[0], **bad}], f)
        with self.assertRaisesRegex(ValueError, regex):
          vd.load(path, load_videos=False)
      with open(path, "w") as f:
        json.dump([{k: v for k, v in rows[0].items() if k != "answer"}], f)
      with self.assertRaisesRegex(ValueError, "missing field 'answer'"):
        vd.load(path, load_videos=False)


if __name__ == "__main__":
  absltest.main()
