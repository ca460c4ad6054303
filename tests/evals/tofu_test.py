"""TOFU's forget quality and model utility against the reference code.

The reference below is a port of github.com/locuslab/tofu at commit bdc209e:
`get_batch_loss` (data_module.py), the per-token losses and truth ratio of
`eval_perturbation_ratio` (evaluate_util.py), and `get_forget_quality` /
`get_model_utility` (aggregate_eval_stat.py), kept as close to the original
as the test allows (torch for the loss, the eval-log dicts as inputs).
"""

from absl.testing import absltest
from flax import nnx
import numpy as np
from scipy.stats import hmean, ks_2samp
import torch
from torch import nn

from jaxlab.data import tokenizers
from jaxlab.evals import tofu
from jaxlab.objectives import tofu_stats
from jaxlab.models import decoder


# -- the reference (ported) ----------------------------------------------------


def ref_get_batch_loss(output, labels):
  shifted_labels = labels[..., 1:].contiguous()
  output = output[..., :-1, :].contiguous()
  loss_function = nn.CrossEntropyLoss(ignore_index=-100, reduction="none")
  loss = loss_function(output.transpose(-1, -2), shifted_labels).sum(dim=-1)
  return loss


def ref_get_forget_quality(unlearn_result, retain_result):
  unlearn_forget_result = unlearn_result["eval_log_forget.json"]
  retain_forget_result = retain_result["eval_log_forget.json"]
  unlearn_paraphrase_np_values = np.array(
      list(unlearn_forget_result["avg_paraphrased_loss"].values()))
  unlearn_perturbed_np_values = np.array(
      list(unlearn_forget_result["average_perturb_loss"].values()))
  unlearn_perturbed_np_values = unlearn_perturbed_np_values.mean(axis=-1)
  retain_paraphrase_np_values = np.array(
      list(retain_forget_result["avg_paraphrased_loss"].values()))
  retain_perturbed_np_values = np.array(
      list(retain_forget_result["average_perturb_loss"].values()))
  retain_perturbed_np_values = retain_perturbed_np_values.mean(axis=-1)
  unlearn_truth_ratio = np.exp(unlearn_perturbed_np_values
                               - unlearn_paraphrase_np_values)
  retain_truth_ratio = np.exp(retain_perturbed_np_values
                              - retain_paraphrase_np_values)
  test_res = ks_2samp(unlearn_truth_ratio, retain_truth_ratio)
  return {"Forget Quality": test_res.pvalue,
          "KS Test PVal Forget": test_res.pvalue,
          "KS Test Forget": test_res.statistic}


def ref_get_model_utility(eval_result_dict):
  eval_task_dict = {
      "eval_real_author_wo_options.json": "Real Authors",
      "eval_real_world_wo_options.json": "Real World",
      "eval_log.json": "Retain",
      "eval_log_forget.json": "Forget",
  }
  eval_tasks = list(eval_task_dict.keys())
  metrics = ["ROUGE", "Prob.", "Truth Ratio"]
  output_result = {}
  for eval_task in eval_tasks:
    for metric in metrics:
      output_result[metric + " " + eval_task_dict[eval_task]] = []
  for k, _ in eval_result_dict.items():
    if "eval_log" in k:
      gt_probs = np.exp(-1 * np.array(
          list(eval_result_dict[k]["avg_gt_loss"].values())))
      avg_gt_prob = np.mean(gt_probs)
    else:
      avg_true_prob = np.exp(-1 * np.array(
          list(eval_result_dict[k]["avg_gt_loss"].values())))
      avg_false_prob = np.exp(-1 * np.array(
          list(eval_result_dict[k]["average_perturb_loss"].values())))
      avg_all_prob = np.concatenate(
          [np.expand_dims(avg_true_prob, axis=-1), avg_false_prob],
          axis=1).sum(-1)
      avg_gt_prob = np.mean(avg_true_prob / avg_all_prob)
    output_result[f"Prob. {eval_task_dict[k]}"] = avg_gt_prob
    avg_rouge = np.array(
        list(eval_result_dict[k]["rougeL_recall"].values())).mean()
    output_result[f"ROUGE {eval_task_dict[k]}"] = avg_rouge
    avg_paraphrase_np_values = np.array(
        list(eval_result_dict[k]["avg_paraphrased_loss"].values()))
    avg_perturbed_np_values = np.array(
        list(eval_result_dict[k]["average_perturb_loss"].values()))
    avg_perturbed_np_values = avg_perturbed_np_values.mean(axis=-1)
    curr_stat_1 = np.exp(avg_perturbed_np_values - avg_paraphrase_np_values)
    if "forget" in k:
      paraphrased_perturb_ratio = np.mean(np.minimum(curr_stat_1,
                                                     1 / curr_stat_1))
    else:
      paraphrased_perturb_ratio = np.mean(np.maximum(0, 1 - 1 / curr_stat_1))
    output_result[f"Truth Ratio {eval_task_dict[k]}"] = (
        paraphrased_perturb_ratio)
  model_utility_cands = []
  for k, v in output_result.items():
    if "Forget" not in k:
      model_utility_cands.append(v)
  output_result["Model Utility"] = hmean(model_utility_cands)
  return output_result


# -- eval logs written by hand -------------------------------------------------

FILES = {"retain": "eval_log.json",
         "real_authors": "eval_real_author_wo_options.json",
         "world_facts": "eval_real_world_wo_options.json",
         "forget": "eval_log_forget.json"}


def _task_arrays(rng, n, k=5, shift=0.0):
  return {"avg_gt_loss": rng.uniform(0.2, 3.0, n) + shift,
          "avg_paraphrased_loss": rng.uniform(0.5, 3.0, n) + shift,
          "average_perturb_loss": rng.uniform(0.5, 4.0, (n, k)),
          "rouge_l_recall": rng.uniform(0.0, 1.0, n)}


def _as_eval_log(arrays):
  """The reference's {metric: {data_idx: value}} layout."""
  return {"avg_gt_loss": dict(enumerate(arrays["avg_gt_loss"].tolist())),
          "avg_paraphrased_loss": dict(enumerate(
              arrays["avg_paraphrased_loss"].tolist())),
          "average_perturb_loss": dict(enumerate(
              arrays["average_perturb_loss"].tolist())),
          "rougeL_recall": dict(enumerate(arrays["rouge_l_recall"].tolist()))}


class ReferenceParityTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    self.unlearned = {t: _task_arrays(rng, n) for t, n in
                      (("retain", 13), ("real_authors", 7),
                       ("world_facts", 9), ("forget", 11))}
    self.retained = {"forget": _task_arrays(rng, 11, shift=0.7)}

  def test_model_utility_and_task_metrics_equal_reference(self):
    ref = ref_get_model_utility({FILES[t]: _as_eval_log(a)
                                 for t, a in self.unlearned.items()})
    names = {"retain": "Retain", "real_authors": "Real Authors",
             "world_facts": "Real World", "forget": "Forget"}
    per_task = {}
    for t, a in self.unlearned.items():
      per_task[t] = tofu.task_metrics(t, **a)
      for ours, theirs in (("rouge", "ROUGE"), ("prob", "Prob."),
                           ("truth_ratio", "Truth Ratio")):
        self.assertAlmostEqual(per_task[t][ours],
                               ref[f"{theirs} {names[t]}"], places=12,
                               msg=f"{t} {ours}")
    self.assertAlmostEqual(tofu.model_utility(per_task),
                           ref["Model Utility"], places=12)

  def test_forget_quality_equals_reference(self):
    for retained in (self.retained["forget"], self.unlearned["forget"]):
      ref = ref_get_forget_quality(
          {"eval_log_forget.json": _as_eval_log(self.unlearned["forget"])},
          {"eval_log_forget.json": _as_eval_log(retained)})
      u, r = self.unlearned["forget"], retained
      got = tofu.forget_quality(u["avg_paraphrased_loss"],
                                u["average_perturb_loss"],
                                r["avg_paraphrased_loss"],
                                r["average_perturb_loss"])
      self.assertAlmostEqual(got["forget_quality"], ref["Forget Quality"],
                             places=12)
      self.assertAlmostEqual(got["ks_statistic"], ref["KS Test Forget"],
                             places=12)
    # Same distribution: statistic 0, p-value 1.
    self.assertEqual(got["forget_quality"], 1.0)

  def test_truth_ratio_hand_computed(self):
    # R = exp(mean(1, 3) - 1) = e; exp(mean(0.5, 0.5) - 1.5) = e^-1.
    np.testing.assert_allclose(
        tofu.truth_ratio([1.0, 1.5], [[1.0, 3.0], [0.5, 0.5]]),
        [np.e, np.exp(-1.0)])
    with self.assertRaisesRegex(ValueError, r"\[N=2, K\]"):
      tofu.truth_ratio([1.0, 1.5], [1.0, 2.0])

  def test_batch_loss_equals_get_batch_loss(self):
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(3, 6, 11)).astype(np.float32)
    labels = rng.integers(0, 11, (3, 6))
    labels[0, :3] = -100  # question tokens
    labels[1, 4:] = -100  # padding
    labels[2, :2] = -100
    ref = ref_get_batch_loss(torch.tensor(logits), torch.tensor(labels))
    np.testing.assert_allclose(tofu.batch_loss(logits, labels), ref.numpy(),
                               rtol=1e-5)
    n = (labels[:, 1:] != -100).sum(-1)
    np.testing.assert_allclose(tofu.per_token_loss(logits, labels),
                               ref.numpy() / n, rtol=1e-5)

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, "TOFU task"):
      tofu.task_metrics("holdout", **self.unlearned["forget"])
    with self.assertRaisesRegex(ValueError, "world_facts"):
      tofu.model_utility({"retain": {}, "real_authors": {}})


class ModelLossTest(absltest.TestCase):

  def test_answer_losses_equal_batch_loss_of_the_logits(self):
    """answer_losses = TOFU's loss on the model's own logits, labels -100
    on the question (bos + prompt) and the answer + eos as targets."""
    tok = tokenizers.ByteTokenizer()
    model = decoder.Decoder(decoder.DecoderConfig(
        vocab_size=tok.vocab_size, dim=16, num_layers=1, num_heads=2,
        num_kv_heads=1, mlp_dim=32, init_std=0.5), rngs=nnx.Rngs(0))
    prompts = ["Q: who?\nA: ", "Q: where is it?\nA: "]
    answers = ["Bob.", "In Paris, France."]
    got = tofu_stats.answer_losses(model, tok, prompts, answers, max_len=40,
                             batch_size=2)
    for p, a, g in zip(prompts, answers, got):
      q_ids = tok.encode(p, add_bos=True)
      ids = q_ids + tok.encode(a, add_eos=True)
      labels = np.array([[-100] * len(q_ids) + ids[len(q_ids):]])
      logits = np.asarray(model(np.array([ids], np.int32)))
      self.assertAlmostEqual(g, float(tofu.per_token_loss(logits, labels)[0]),
                             places=4)
    with self.assertRaisesRegex(ValueError, "max_len=6"):
      tofu_stats.answer_losses(model, tok, prompts, answers, max_len=6)


if __name__ == "__main__":
  absltest.main()
