"""Tests of VideoReasonBench scoring (jaxlab/evals/video_reason.py)."""

from absl.testing import absltest

from jaxlab import registry
from jaxlab.data.synthetic import video_reason as vr
from jaxlab.evals import video_reason as ev


class ScoreTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.video = vr.make_video("number", 3, 5, "start", seed=1)
    cls.recs = cls.video.questions   # one per skill, in SKILLS order

  def test_extract_answer(self):
    self.assertEqual(ev.extract_answer("think... Final Answer: 3"), "3")
    self.assertEqual(ev.extract_answer("a final answer: 1. **Final Answer:** "
                                       "(a,1) up"), "(a,1) up")
    with self.assertRaisesRegex(vr.MalformedAnswerError, "Final Answer"):
      ev.extract_answer("3")
    self.assertEqual(ev.extract_answer(" 3 ", require_marker=False), "3")

  def test_hand_made_responses(self):
    recs = self.recs
    count = int(recs[1]["answer"])
    responses = [
        "Final Answer: " + recs[0]["answer"],          # right
        f"Final Answer: {count} times",                # right
        "Final Answer: (a,1): 1",                      # malformed board
        "Final Answer: " + recs[3]["answer"],          # right
        recs[4]["answer"],                             # no marker: malformed
        "Final Answer: " + recs[5]["answer"],          # right
    ]
    rep = ev.score(recs, responses)
    self.assertEqual(rep.correct, [True, True, False, True, False, True])
    self.assertEqual(rep.malformed, 2)
    self.assertEqual(rep.malformed_index, [2, 4])
    self.assertAlmostEqual(rep.accuracy, 4 / 6)
    self.assertEqual(rep.per_level, {1: 1.0, 2: 0.5, 3: 0.5})
    self.assertEqual(rep.per_skill["infer_state"], 0.0)
    self.assertEqual(rep.by["op_bin"], {"5-9": 4 / 6})
    self.assertEqual(ev.level_accuracy(rep, 2), 0.5)
    self.assertIn("2 malformed", rep.summary())
    wrong = ev.score(recs[1:2], [f"Final Answer: {count + 1}"])
    self.assertEqual((wrong.accuracy, wrong.malformed), (0.0, 0))

  def test_llm_judge_adapter(self):
    prompts = []

    def fake_llm(prompt):
      prompts.append(prompt)
      return "Correct" if "(a," in prompt.split("Model response:")[1] \
          else "Incorrect"

    judge = ev.LLMJudge(fake_llm)
    rep = ev.score(self.recs[:3], ["Final Answer: (a,1) up", "Final Answer: 2",
                                   "Final Answer: x"], judge=judge)
    self.assertEqual(rep.correct, [True, False, False])
    self.assertIn("Directly output \"Correct\" or \"Incorrect\"", prompts[0])
    bad = ev.LLMJudge(lambda p: "maybe")
    self.assertEqual(ev.score(self.recs[:1], ["Final Answer: 1"],
                              judge=bad).malformed, 1)

  def test_bad_input(self):
    with self.assertRaisesRegex(ValueError, "one response per record"):
      ev.score(self.recs, ["Final Answer: 1"])
    with self.assertRaisesRegex(registry.UnknownNameError, "exact"):
      ev.score(self.recs[:1], ["Final Answer: 1"], judge="gpt")
    bad = dict(self.recs[0], dim="recall_colour")
    with self.assertRaisesRegex(registry.UnknownNameError, "recall_colour"):
      ev.score([bad], ["Final Answer: 1"])
    with self.assertRaisesRegex(ValueError, "level must be 1, 2 or 3"):
      ev.level_accuracy(ev.score(self.recs[:1], ["x"]), 5)


if __name__ == "__main__":
  absltest.main()
