"""Tests for jaxlab.rewards.chart: normaliser, extractors, matchers, rewards."""

import math

import numpy as np
from absl.testing import absltest
from absl.testing import parameterized

from skimage import metrics as skmetrics

from jaxlab.evals import text as text_metrics
from jaxlab.rewards import chart
from jaxlab.rewards import sandbox

GT = """
import matplotlib.pyplot as plt
import numpy as np
vals = [3, 5, 2]
fig, axes = plt.subplots(1, 2)
axes[0].bar(['a', 'b', 'c'], vals, color='red', label='sales')
axes[1].plot(np.arange(3), [1.0, 2.0, 4.0], 'g--')
axes[1].set_title('Growth')
plt.xlabel('time')
plt.suptitle('Main')
"""

# The same chart written differently: plt-style subplots, keywords instead
# of positionals, hex / named colours, values within 5 %.
EQUIV = """
import matplotlib.pyplot as plt
ax1 = plt.subplot(1, 2, 1)
ax1.bar(x=['a', 'b', 'c'], height=[3.1, 5, 2], color='#ff0000', label='sales')
plt.subplot(122)
plt.plot([0, 1, 2], [1.02, 2.0, 4.0], c='green', linestyle='--')
plt.title('Growth')
plt.xlabel('time')
plt.suptitle('Main')
"""


class NormaliserTest(absltest.TestCase):

  def test_fields_of_gt(self):
    calls = chart.normalize_code(GT)
    self.assertEqual(chart.extract_data_values(calls),
                     [3.0, 5.0, 2.0, 1.0, 2.0, 4.0])
    self.assertEqual(chart.extract_chart_types(calls), ["bar", "plot"])
    self.assertEqual(chart.extract_layout(calls),
                     [(1, 2, 0, 0), (1, 2, 0, 1)])
    self.assertEqual(chart.extract_text(calls),
                     {"0,0:legend": "sales", "0,1:title": "Growth",
                      "0,1:xlabel": "time", "fig:suptitle": "Main"})
    self.assertEqual(chart.extract_colors(calls), ["#ff0000", "#008000"])

  def test_equivalent_code_scores_one(self):
    fields = chart.text_reward_fields(EQUIV, GT)
    self.assertEqual(fields, {d: 1.0 for d in chart.TEXT_DIMENSIONS})

  def test_plot_single_arg_and_fmt(self):
    calls = chart.normalize_code("import matplotlib.pyplot as plt\n"
                                 "plt.plot([4, 5], 'r')")
    self.assertEqual(calls[0].kwargs, {"y": [4, 5], "color": "r"})

  def test_unparseable(self):
    self.assertIsNone(chart.normalize_code("plt.bar([1,"))
    self.assertEqual(chart.text_reward("plt.bar([1,", GT), 0.0)
    with self.assertRaisesRegex(ValueError, "ground-truth"):
      chart.text_reward(GT, "((")

  def test_extract_code(self):
    text = "Sure:\n```python\nplt.plot([1])\n```\nbye"
    self.assertEqual(chart.extract_code(text), "plt.plot([1])\n")
    self.assertIsNone(chart.extract_code("plt.plot([1])", require_fence=True))
    self.assertEqual(chart.extract_code("plt.plot([1])"), "plt.plot([1])")


class MatcherTest(parameterized.TestCase):

  @parameterized.parameters(
      ([100.0], [104.9], 1.0),          # inside 5 %
      ([100.0], [106.0], 0.0),          # outside 5 % of the gt value
      ([1.0, 2.0, 3.0], [3.0, 1.0, 2.0], 1.0),   # order-free
      ([1.0, 2.0], [1.0, 2.0, 3.0, 4.0], 2 * (1.0 * 0.5) / 1.5),  # P=1, R=.5
      ([], [], 1.0),
      ([1.0], [], 0.0),
      ([0.0], [0.0], 1.0),
  )
  def test_numeric_soft_f1(self, pred, gt, expected):
    self.assertAlmostEqual(chart.numeric_soft_f1(pred, gt), expected, places=6)

  def test_numeric_one_to_one(self):
    # Two predictions near one gt value count once: P = 1/2, R = 1/1.
    self.assertAlmostEqual(chart.numeric_soft_f1([10.0, 10.1], [10.0]),
                           2 * 0.5 / 1.5)

  @parameterized.parameters(
      (["bar", "plot"], ["bar", "plot"], 1.0),
      (["bar"], ["barh"], 0.0),                 # hard match
      (["bar", "bar"], ["bar"], 2 * 0.5 / 1.5),  # multiset
  )
  def test_exact_f1(self, pred, gt, expected):
    self.assertAlmostEqual(chart.exact_f1(pred, gt), expected)

  @parameterized.parameters(
      ("kitten", "sitting", 3), ("", "abc", 3), ("flaw", "lawn", 2),
      ("same", "same", 0))
  def test_levenshtein(self, a, b, d):
    self.assertEqual(chart.levenshtein(a, b), d)

  def test_one_edit_distance_implementation(self):
    self.assertIs(chart.levenshtein, text_metrics.levenshtein)
    self.assertIs(chart.edit_similarity, text_metrics.edit_similarity)
    self.assertAlmostEqual(chart.edit_similarity("日本語", "日本"), 1 - 1 / 3)

  def test_edit_similarity_and_text_score(self):
    self.assertAlmostEqual(chart.edit_similarity("kitten", "sitting"),
                           1 - 3 / 7)
    self.assertEqual(chart.edit_similarity("", ""), 1.0)
    # one key matched at 1 - 1/6, one key missing on the prediction side.
    score = chart.text_score({"t": "Growt"}, {"t": "Growth", "x": "time"})
    self.assertAlmostEqual(score, (1 - 1 / 6 + 0.0) / 2)

  def test_each_dimension_detects_its_error(self):
    cases = {
        "data": GT.replace("[3, 5, 2]", "[3, 9, 2]"),
        "type": GT.replace("axes[0].bar", "axes[0].barh"),
        "layout": GT.replace("plt.subplots(1, 2)", "plt.subplots(2, 1)"),
        "text": GT.replace("'Growth'", "'Grow'"),
        "color": GT.replace("color='red'", "color='blue'"),
    }
    for dim, code in cases.items():
      fields = chart.text_reward_fields(code, GT)
      self.assertLess(fields[dim], 1.0, dim)
      others = {k: v for k, v in fields.items() if k != dim}
      if dim == "data":
        self.assertAlmostEqual(fields["data"], 5 / 6)
      if dim == "text":
        self.assertAlmostEqual(fields["text"], (3 + 1 - 2 / 6) / 4)
      if dim not in ("type", "layout"):   # type/layout also move colours...
        self.assertEqual(set(others.values()), {1.0}, dim)


class VisualTest(absltest.TestCase):

  def test_ssim_identity_and_known_value(self):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (32, 40, 3)).astype(np.uint8)
    self.assertAlmostEqual(chart.ssim(img, img), 1.0, places=10)
    # Constant images a and b: SSIM = (2ab + c1) / (a^2 + b^2 + c1).
    a = np.full((16, 16), 100.0)
    b = np.full((16, 16), 150.0)
    c1 = (0.01 * 255) ** 2
    self.assertAlmostEqual(chart.ssim(a, b),
                           (2 * 100 * 150 + c1) / (100 ** 2 + 150 ** 2 + c1))
    noisy = np.clip(img + rng.normal(0, 60, img.shape), 0, 255)
    self.assertLess(chart.ssim(img, noisy), 0.9)

  def test_ssim_matches_numpy_loop(self):
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 255, (10, 12))
    y = np.clip(x + rng.normal(0, 30, x.shape), 0, 255)
    k, vals = 7, []
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    for i in range(10 - k + 1):
      for j in range(12 - k + 1):
        p, q = x[i:i + k, j:j + k].ravel(), y[i:i + k, j:j + k].ravel()
        mx, my = p.mean(), q.mean()
        vx, vy = p.var(ddof=1), q.var(ddof=1)
        cxy = np.cov(p, q)[0, 1]
        vals.append((2 * mx * my + c1) * (2 * cxy + c2) /
                    ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2)))
    self.assertAlmostEqual(chart.ssim(x, y), float(np.mean(vals)), places=8)

  def test_ssim_matches_skimage(self):
    """Our SSIM judge is skimage's uniform-window SSIM on luma."""
    rng = np.random.default_rng(2)
    luma = np.array([0.299, 0.587, 0.114])
    for shape in ((64, 64, 3), (48, 40, 3), (10, 12), (32, 40, 4), (7, 9)):
      a = rng.integers(0, 256, shape).astype(np.uint8)
      b = np.clip(a + rng.normal(0, 40, shape), 0, 255)
      ga, gb = a.astype(np.float64), b
      if len(shape) == 3:
        ga, gb = ga[..., :3] @ luma, gb[..., :3] @ luma
      want = skmetrics.structural_similarity(
          ga, gb, win_size=7, gaussian_weights=False,
          use_sample_covariance=True, data_range=255.0)
      self.assertAlmostEqual(chart.ssim(a, b), want, places=12, msg=shape)
    # A side below the window: the largest odd window that fits (5 of 6).
    x = rng.uniform(0, 255, (6, 8))
    y = np.clip(x + rng.normal(0, 30, x.shape), 0, 255)
    self.assertAlmostEqual(chart.ssim(x, y), skmetrics.structural_similarity(
        x, y, win_size=5, data_range=255.0), places=12)
    with self.assertRaisesRegex(ValueError, "at least 3 x 3"):
      chart.ssim(np.zeros((2, 9)), np.zeros((2, 9)))
    with self.assertRaisesRegex(ValueError, "shapes differ"):
      chart.ssim(np.zeros((9, 9)), np.zeros((9, 8)))

  def test_judge_registry(self):
    self.assertIn("ssim", chart.JUDGES)
    with self.assertRaisesRegex(ValueError, "valid choices: histogram"):
      chart.get_judge("gpt")
    img = np.zeros((8, 8, 3), np.uint8)
    self.assertAlmostEqual(chart.JUDGES["histogram"](img, img), 1.0)
    self.assertAlmostEqual(chart.JUDGES["pixel_mse"](img, img + 255), 0.0)

  def test_visual_and_exec_reward_on_failure(self):
    bad = sandbox.RenderResult(False, None, "timeout")
    self.assertEqual(chart.visual_reward(bad, np.zeros((8, 8, 3))), 0.0)
    self.assertEqual(chart.exec_reward(bad), 0.0)


def _fake_render(image_of):
  """A render fn that skips the sandbox (tests the reward arithmetic)."""
  def render(code, *, timeout_s, size):
    del timeout_s
    img = image_of(code)
    if img is None:
      return sandbox.RenderResult(False, None, "boom")
    return sandbox.RenderResult(True, img[:size[0], :size[1]], "")
  return render


class RewardTest(absltest.TestCase):

  def test_weighted_reward(self):
    cfg = chart.ChartRewardConfig(w_text=0.5, w_vis=0.3, w_exec=0.2)
    self.assertAlmostEqual(chart.weighted_reward(0.8, 0.5, 1.0, cfg),
                           0.5 * 0.8 + 0.3 * 0.5 + 0.2 * 1.0)

  def test_chart_group_reward(self):
    target = np.full((64, 64, 3), 255, np.uint8)
    target[20:40, 20:40] = 0
    cfg = chart.ChartRewardConfig(w_text=0.5, w_vis=0.3, w_exec=0.2)
    render = _fake_render(lambda code: None if "boom" in code else target)
    wrong_text = GT.replace("'Growth'", "'Grow'")
    rewards, comps = chart.chart_group_reward(
        [GT, wrong_text, "boom(", "```python\n" + GT + "```"], [GT] * 4,
        [target] * 4, cfg, render=render)
    text_wrong = (1.0 * 4 + (3 + 1 - 2 / 6) / 4) / 5
    np.testing.assert_allclose(comps["text"], [1.0, text_wrong, 0.0, 1.0],
                               rtol=1e-6)
    np.testing.assert_allclose(comps["exec"], [1, 1, 0, 1])
    np.testing.assert_allclose(comps["vis"], [1, 1, 0, 1])
    np.testing.assert_allclose(
        rewards, [1.0, 0.5 * text_wrong + 0.5, 0.0, 1.0], rtol=1e-6)

  def test_real_sandbox_reward(self):
    gt_img = sandbox.render_chart(GT, timeout_s=30, size=(48, 48)).image
    cfg = chart.ChartRewardConfig(size=(48, 48), timeout_s=30)
    same = chart.chart_reward(EQUIV, GT, gt_img, cfg)
    other = chart.chart_reward(
        "import matplotlib.pyplot as plt\nplt.pie([1, 1, 1])", GT, gt_img, cfg)
    self.assertEqual(same["exec"], 1.0)
    self.assertEqual(other["exec"], 1.0)
    self.assertGreater(same["vis"], 0.9)
    self.assertGreater(same["vis"], other["vis"] + 0.1)
    self.assertGreater(same["reward"], other["reward"])

  def test_pool_renders_the_same_rewards_as_fresh_processes(self):
    gt_img = sandbox.render_chart(GT, timeout_s=30, size=(48, 48)).image
    cfg = chart.ChartRewardConfig(size=(48, 48), timeout_s=30)
    codes = [EQUIV, "import matplotlib.pyplot as plt\nplt.pie([1, 1, 1])",
             "boom("]
    args = (codes, [GT] * 3, [gt_img] * 3)
    fresh, fresh_comps = chart.chart_group_reward(*args, cfg)
    pooled, pooled_comps = chart.chart_group_reward(*args,
                                                    cfg.replace(pool=True))
    np.testing.assert_array_equal(pooled, fresh)
    for k in fresh_comps:
      np.testing.assert_array_equal(pooled_comps[k], fresh_comps[k])
    np.testing.assert_array_equal(fresh_comps["exec"], [1, 1, 0])

  def test_curriculum(self):
    cur = chart.CurriculumConfig.two_stage(10, 5, stage1_data="a",
                                           stage2_data="b")
    s0, s9, s10, s99 = (chart.stage_for_step(s, cur) for s in (0, 9, 10, 99))
    self.assertEqual((s0.dataset, s0.reward.w_vis), ("a", 0.0))
    self.assertEqual(s9.name, "text_exec")
    self.assertEqual((s10.dataset, s10.reward.w_vis), ("b", 1.0))
    self.assertEqual(s99.name, "text_vis_exec")
    # Stage 1 skips the visual term even with a perfect rendering.
    render = _fake_render(lambda code: np.zeros((64, 64, 3), np.uint8))
    r = chart.chart_reward(GT, GT, np.zeros((64, 64, 3), np.uint8),
                           s0.reward, render=render)
    self.assertEqual((r["vis"], r["reward"]), (0.0, 2.0))
    self.assertTrue(math.isclose(chart.chart_reward(
        GT, GT, np.zeros((64, 64, 3), np.uint8), s10.reward,
        render=render)["reward"], 3.0))


if __name__ == "__main__":
  absltest.main()
