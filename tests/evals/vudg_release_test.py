"""VUDG's released metric script == `jaxlab.evals.vudg.score(strict=True)`.

The reference is github.com/VUDG-Video/VUDG at commit
77bc03795dffe45af4ff744b7ad20c3a42955fff, `utils/collect_results.py`
(its main block as a function returning what it prints: the per-domain
accuracies, their unweighted mean "Avg" = D-Avg, the per-question-type
accuracies and their QA-weighted "Avg"). Rows are in data/test_multi.json's
layout (QA_num, video, domain, question, answer, question_type; domains as
released, "egocentric video" included) with a `pred` as
zero_shot/qwen2.5vl.py writes it.
"""

from absl.testing import absltest
import numpy as np

from jaxlab.data import vudg as vudg_data
from jaxlab.evals import vudg


def collect_results(rows):
  """utils/collect_results.py (mode "all"), returning its numbers."""
  domains, category = {}, {}
  for item in rows:
    domain, qa_type = item["domain"], item["question_type"]
    pred, gt = item.get("pred", None), item["answer"]
    if domain not in domains:
      domains[domain] = [0.0, 0]
    if qa_type not in category:
      category[qa_type] = [0.0, 0]
    pred = pred.strip().upper() if pred else ""
    gt = gt.strip().upper()
    if pred == gt:
      domains[domain][0] += 1
      category[qa_type][0] += 1
    domains[domain][1] += 1
    category[qa_type][1] += 1
  domains_list = list(domains.keys())
  domain_accs = [domains[d][0] / domains[d][1] for d in domains_list]
  avg_acc = sum(domain_accs) / len(domain_accs)
  type_list = [t for t in range(1, 5) if t in category]
  category_accs = [category[d][0] / category[d][1] for d in type_list]
  avg_cat_acc = (sum(v[0] for v in category.values())
                 / sum(v[1] for v in category.values()))
  return (dict(zip(domains_list, domain_accs)), avg_acc,
          dict(zip(type_list, category_accs)), avg_cat_acc)


RELEASED = ("cartoon", "movie-TVshow", "game", "virtual", "egocentric video",
            "surveillance", "shaky", "foggy", "night", "rainy", "snowy")


def released_rows(n=120, seed=0):
  rng = np.random.default_rng(seed)
  rows = []
  for i in range(n):
    domain = RELEASED[int(rng.integers(len(RELEASED)))]
    k = int(rng.integers(4, 7))   # options per question
    answer = "ABCDEF"[int(rng.integers(k))]
    question = f"What happens in clip {i}?" + "".join(
        f"\n({'ABCDEF'[j]}) Option {j} of {i}." for j in range(k))
    pred = rng.choice([answer, answer.lower() + " ", "ABCDEF"[
        int(rng.integers(k))], f"({answer})", "", None, "Error"])
    rows.append({"QA_num": i, "video": f"{i // 3:04d}.mp4",
                 "domain": domain, "question": question, "answer": answer,
                 "question_type": int(rng.integers(1, 5)), "pred": pred})
  return rows


class CollectResultsParityTest(absltest.TestCase):

  def test_d_avg_domains_and_types_equal_the_script(self):
    rows = released_rows()
    by_domain, d_avg, by_type, overall = collect_results(rows)
    qs = vudg_data.from_rows(rows)
    res = vudg.score(qs, [r["pred"] or "" for r in rows], strict=True,
                     match_option_text=False)
    self.assertAlmostEqual(res.d_avg, d_avg, places=12)
    self.assertAlmostEqual(res.overall, overall, places=12)
    self.assertEqual(
        {vudg_data.canonical_domain(d): v for d, v in by_domain.items()},
        res.by_domain)
    for t, acc in by_type.items():
      self.assertAlmostEqual(res.by_question_type[t], acc, places=12)
    # The shift-type means are those of the released DOMAINS groups.
    self.assertAlmostEqual(res.by_shift_type["viewpoint"], np.mean(
        [by_domain[d] for d in ("egocentric video", "surveillance",
                                "shaky")]))
    # A different prediction changes the answer (the check is not vacuous).
    self.assertGreater(res.d_avg, 0.0)
    self.assertLess(res.d_avg, 1.0)

  def test_subset_of_domains_averages_those_present(self):
    rows = [r for r in released_rows(seed=1) if r["domain"] in (
        "night", "egocentric video")]
    _, d_avg, _, _ = collect_results(rows)
    res = vudg.score(vudg_data.from_rows(rows),
                     [r["pred"] or "" for r in rows], strict=True)
    self.assertEqual(set(res.by_domain), {"night", "egocentric"})
    self.assertAlmostEqual(res.d_avg, d_avg, places=12)

  def test_rows_and_video_paths_as_released(self):
    rows = released_rows(6)
    train = [{k: v for k, v in r.items() if k not in ("QA_num", "pred")}
             for r in rows]   # the dataset card's train features
    qs = vudg_data.from_rows(train)
    self.assertEqual([q.qa_num for q in qs], list(range(6)))
    q = vudg_data.from_row(dict(rows[0], domain="egocentric video"))
    self.assertEqual(q.domain, "egocentric")
    self.assertEqual(vudg_data.video_path("/r", "test", q),
                     "/r/testset/egocentric video/0000.mp4")
    self.assertEqual(vudg_data.video_path("/r", "train", q),
                     "/r/trainset/egocentric video/0000.mp4")
    self.assertEqual(q.to_json()["domain"], "egocentric video")
    with self.assertRaisesRegex(ValueError, "row 3: unknown domain 'space'"):
      vudg_data.from_rows(rows[:3] + [dict(rows[3], domain="space")])
    with self.assertRaisesRegex(ValueError, "missing field 'answer'"):
      vudg_data.from_row({k: v for k, v in rows[0].items() if k != "answer"})
    with self.assertRaisesRegex(ValueError, "trainset"):
      vudg_data.video_path("/r", "validation", q)


if __name__ == "__main__":
  absltest.main()
