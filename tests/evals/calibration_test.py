"""Tests for jaxlab.evals.calibration: smECE against Apple's relplot, hand
cases for binned ECE and B-confidence, the probe, and bad input."""

import jax
import numpy as np
from absl.testing import absltest
from absl.testing import parameterized
import relplot
from relplot import metrics as relplot_metrics

from jaxlab.data import tokenizers
from jaxlab.evals import calibration as cal
from jaxlab.testing import tiny_models


def _synthetic(kind: str, n: int, seed: int):
  rng = np.random.default_rng(seed)
  f = rng.uniform(size=n)
  if kind == "random":
    y = rng.integers(0, 2, n)
  elif kind == "calibrated":
    y = rng.uniform(size=n) < f
  elif kind == "overconfident":
    y = rng.uniform(size=n) < f ** 3
  else:  # underconfident, with mass at the ends of [0, 1]
    f = np.clip(rng.beta(0.5, 0.5, n), 0.0, 1.0)
    y = rng.uniform(size=n) < np.sqrt(f)
  return f, y.astype(float)


class SmoothEceTest(parameterized.TestCase):

  @parameterized.product(kind=("random", "calibrated", "overconfident",
                               "underconfident"), n=(40, 1000))
  def test_equals_relplot(self, kind, n):
    f, y = _synthetic(kind, n, seed=n)
    ours, sigma = cal.smooth_ece(f, y, return_sigma=True)
    ref, ref_sigma = relplot.smECE(f, y, return_width=True)
    self.assertAlmostEqual(ours, ref, delta=1e-4)
    self.assertAlmostEqual(sigma, ref_sigma, delta=1e-9)
    if kind == "calibrated" and n == 1000:
      self.assertLess(ours, 0.05)
    if kind == "overconfident" and n == 1000:
      self.assertGreater(ours, 0.15)

  def test_fixed_sigma_equals_relplot(self):
    f, y = _synthetic("overconfident", 300, seed=3)
    for sigma in (0.01, 0.05, 0.3):
      self.assertAlmostEqual(cal.smooth_ece_at(f, y, sigma),
                             relplot_metrics.smECE_sigma(f, y, sigma),
                             delta=1e-4)

  def test_perfect_predictions(self):
    self.assertAlmostEqual(cal.smooth_ece([1.0, 1.0, 0.0], [1, 1, 0]), 0.0)


class BinnedEceTest(absltest.TestCase):

  def test_hand_case(self):
    # Bin [0.1, 0.2): confs .1, .15, labels 0, 1 -> |0.25 - 1| = 0.75.
    # Last bin [0.9, 1]: confs .9, .95, 1.0, labels 1, 1, 0 -> |2.85 - 2|.
    f = [0.1, 0.15, 0.9, 0.95, 1.0]
    y = [0, 1, 1, 1, 0]
    self.assertAlmostEqual(cal.binned_ece(f, y), (0.75 + 0.85) / 5)
    # One bin: |mean conf - accuracy|.
    self.assertAlmostEqual(cal.binned_ece(f, y, num_bins=1),
                           abs(np.mean(f) - 0.6))

  def test_equals_relplot_without_confidence_one(self):
    f, y = _synthetic("overconfident", 500, seed=7)
    self.assertAlmostEqual(cal.binned_ece(f, y, num_bins=15),
                           relplot_metrics.binnedECE(f, y, nbins=15),
                           places=10)


class BConfidenceTest(absltest.TestCase):

  def test_numeric_collapse_and_plurality(self):
    responses = ["it is 42", " 42.", "answer 17", "17", "42", "no idea"]
    classes = cal.collapse_all("q", responses, "numeric")
    self.assertEqual(classes, ["42", "42", "17", "17", "42", cal.NO_ANSWER])
    conf, pred = cal.b_confidence(classes)
    self.assertEqual((conf, pred), (0.5, "42"))
    self.assertEqual(cal.class_distribution(classes),
                     {"42": 0.5, "17": 1 / 3, cal.NO_ANSWER: 1 / 6})
    # A tie goes to the class sampled first.
    self.assertEqual(cal.b_confidence(["17", "42", "42", "17"]), (0.5, "17"))
    self.assertEqual(cal.collapse_numeric("", "so 1,000.0 total"), "1000")

  def test_calibration_data(self):
    out = cal.b_calibration_data(
        ["a", "b"],
        [["The Red.", "red", "blue"], ["blue", "Blue!", "green", "red"]],
        ["RED", "red"], collapse="normalized")
    np.testing.assert_allclose(out["confidence"], [2 / 3, 0.5])
    np.testing.assert_array_equal(out["correct"], [1.0, 0.0])
    self.assertEqual(out["prediction"], ["red", "blue"])
    exact = cal.b_calibration_data(["a"], [["red", "Red", "Red"]], ["red"],
                                   collapse="exact")
    self.assertEqual(exact["correct"].tolist(), [0.0])

  def test_judge_collapse(self):
    same_first_letter = lambda q, a, b: a[0] == b[0]
    self.assertEqual(cal.judge_collapse(
        "q", ["apple", "avocado", "banana", "apricot", "blueberry", "cherry"],
        same_first_letter), [0, 0, 1, 0, 1, 2])

  def test_unknown_collapser(self):
    with self.assertRaisesRegex(Exception, "collapsing function"):
      cal.collapse_all("q", ["x"], "nope")


class BadInputTest(parameterized.TestCase):

  @parameterized.parameters(
      (cal.smooth_ece,), (cal.binned_ece,), (cal.reliability_curve,))
  def test_confidence_outside_unit_interval(self, fn):
    with self.assertRaisesRegex(ValueError, r"confidences must lie in \[0, 1\]"):
      fn([0.2, 1.3, 0.5], [1, 0, 1])
    with self.assertRaisesRegex(ValueError, r"confidences must lie in \[0, 1\]"):
      fn([-0.1, 0.3], [1, 0])

  def test_length_mismatch(self):
    with self.assertRaisesRegex(ValueError, "one .confidence, correct. per"):
      cal.smooth_ece([0.2, 0.3], [1])


class ReliabilityTest(absltest.TestCase):

  def test_curve_on_calibrated_data(self):
    f, y = _synthetic("calibrated", 2000, seed=0)
    curve = cal.reliability_curve(f, y, num_bootstrap=20, seed=0)
    self.assertAlmostEqual(curve["smece"], cal.smooth_ece(f, y))
    mid = (curve["t"] > 0.2) & (curve["t"] < 0.8)
    np.testing.assert_allclose(curve["accuracy"][mid], curve["t"][mid],
                               atol=0.08)
    self.assertTrue(np.all(curve["lower"] <= curve["upper"]))
    self.assertLessEqual(curve["smece_lower"], curve["smece_upper"])


class ProbeTest(absltest.TestCase):

  def test_lora_probe_fits_target_distributions(self):
    tok = tokenizers.ByteTokenizer()
    model = tiny_models.tiny_decoder(vocab_size=tok.vocab_size)
    prompts = ["ab", "cd", "ef", "gh"]
    targets = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [1 / 3] * 3,
                        [0.0, 0.5, 0.5]])
    batch = cal.probe_batch(tok, prompts, targets, [120, 121, 122],
                            max_len=4)
    before = cal.probe_kl(model, batch)
    probe = cal.train_probe(model, batch, steps=60, batch_size=4, lr=2e-2,
                            rank=8)
    after = cal.probe_kl(probe, batch)
    self.assertLess(after, 0.2 * before)
    # The probe trains a copy: the original model is untouched.
    self.assertAlmostEqual(cal.probe_kl(model, batch), before, places=5)

    # StepRunner(lora=...) moves only the LoRA factors (same settings as
    # train_probe above, so the compiled step is reused).
    import ml_collections  # pylint: disable=g-import-not-at-top
    from flax import nnx  # pylint: disable=g-import-not-at-top
    from jaxlab.train import lora as lora_lib  # pylint: disable=g-import-not-at-top
    from jaxlab.train import runner  # pylint: disable=g-import-not-at-top
    r = runner.StepRunner(
        nnx.clone(model), loss="calibration_probe", loss_config=None,
        optim=runner.optim_config(lr=2e-2), steps=60, seed=0,
        lora=ml_collections.ConfigDict({"rank": 8, "alpha": 16.0, "targets": (
            "q_dnh", "v_dkh", "o_nhd")}))
    # Host copies: the step donates the old state's buffers.
    leaves = lambda kind: [np.array(x) for x in jax.tree.leaves(  # pylint: disable=g-long-lambda
        nnx.state(r.model(), kind))]
    params0, lora0 = leaves(nnx.Param), leaves(lora_lib.LoRA)
    r.step(batch, 0)
    r.step(batch, 1)
    params1, lora1 = leaves(nnx.Param), leaves(lora_lib.LoRA)
    self.assertLen(lora0, 12)  # A and B of 3 weights in 2 layers
    for a, b in zip(params0, params1):
      np.testing.assert_array_equal(a, b)
    self.assertTrue(any(not np.allclose(a, b) for a, b in zip(lora0, lora1)))


class GradedCalibrationTest(absltest.TestCase):

  def test_metrics_hand_case(self):
    f, y = [0.9, 0.2, 0.6, 0.6], [1, 0, 0, 1]
    m = cal.calibration_metrics(f, y, num_bins=10)
    # Bins 9, 2, 6: |0.9 - 1| / 4 + |0.2 - 0| / 4 + |0.6 - 0.5| * 2 / 4.
    self.assertAlmostEqual(m["binned_ece"], 0.125, places=12)
    self.assertAlmostEqual(m["accuracy"], 0.5)
    self.assertAlmostEqual(m["confidence"], 0.575)
    self.assertAlmostEqual(m["overconfidence"], 0.075)
    self.assertEqual(m["smece"], cal.smooth_ece(f, y))
    with self.assertRaisesRegex(ValueError, "must lie in"):
      cal.calibration_metrics([1.5], [1])

  def test_graded_plurality(self):
    responses = [["Paris.", "It is Paris", "Lyon", "paris"],
                 ["Lyon", "Nice", "x", "y"],
                 ["", "", "Rome", "Rome"]]
    classes = [["paris", "paris", "lyon", "paris"],
               ["lyon", "nice", "x", "y"],
               [None, None, "rome", "rome"]]
    seen = []

    def grade(i, text):
      seen.append((i, text))
      return "paris" in text.lower() or text == "Rome"

    d = cal.b_calibration_graded(responses, classes, grade)
    np.testing.assert_allclose(d["confidence"], [0.75, 0.25, 0.5])
    # Ties go to the class sampled first: "lyon", then None (no answer).
    np.testing.assert_array_equal(d["correct"], [1.0, 0.0, 0.0])
    self.assertEqual(seen, [(0, "Paris."), (1, "Lyon"), (2, "")])
    with self.assertRaisesRegex(ValueError, "give one each"):
      cal.b_calibration_graded(responses, classes[:2], grade)


if __name__ == "__main__":
  absltest.main()
