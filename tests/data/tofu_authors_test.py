"""`jaxlab.data.synthetic.tofu_authors`: fictitious authors in TOFU's layout.

The copy is read back by the TOFU reader the unlearning run uses
(`jaxlab.data.tofu.read`, with TOFU's own evaluation tasks), each column is
checked against the facts it states, and the fine-tuning rows are checked
to put the answer after exactly the prompt the unlearning run asks with
(SmolLM2's chat template, PMC's system prompt).
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest

from jaxlab.configs import pmc as pmc_config
from jaxlab.data import tofu as tofu_data
from jaxlab.data.synthetic import facts as facts_lib
from jaxlab.data.synthetic import tofu_authors
from jaxlab.evals import tofu as tofu_evals
from jaxlab.experiments import pmc as pmc_exp


def _jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


class TofuAuthorsTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.dest = os.path.join(cls.root, "tofu")
    cls.counts = tofu_authors.write_tofu_copy(cls.dest)
    cls.facts = facts_lib.make_fact_set(20, forget_frac=0.1, num_world=10,
                                        seed=0)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_counts_and_columns(self):
    self.assertEqual(self.counts["forget10"], 8)     # 2 people x 4 facts
    self.assertEqual(self.counts["retain90"], 72)
    self.assertEqual(self.counts["full"], 80)
    self.assertEqual(self.counts["finetune.jsonl"], 80)
    cols = {"question", "answer"}
    para = cols | {"paraphrased_question", "paraphrased_answer",
                   "perturbed_answer"}
    for name, want in (("forget10", cols), ("retain90", cols),
                       ("world_facts", cols), ("real_authors", cols),
                       ("forget10_perturbed", para),
                       ("retain_perturbed", para),
                       ("world_facts_perturbed", cols | {"perturbed_answer"}),
                       ("real_authors_perturbed",
                        cols | {"perturbed_answer"})):
      rows = _jsonl(os.path.join(self.dest, f"{name}.json"))
      self.assertLen(rows, self.counts[name])
      self.assertTrue(all(set(r) == want for r in rows), name)
    # forget + retain = full, and the forget people are not retained.
    full = _jsonl(os.path.join(self.dest, "full.json"))
    forget = _jsonl(os.path.join(self.dest, "forget10.json"))
    retain = _jsonl(os.path.join(self.dest, "retain90.json"))
    self.assertEqual(full, forget + retain)
    names = lambda rows: {r["answer"].split(" was ")[0] for r in rows  # pylint: disable=g-long-lambda
                          if " was born in " in r["answer"]}
    self.assertEmpty(names(forget) & names(retain))
    self.assertLen(names(forget), 2)

  def test_paraphrases_and_perturbations_state_the_right_values(self):
    rows = _jsonl(os.path.join(self.dest, "forget10_perturbed.json"))
    for r, qa in zip(rows, self.facts.forget):
      self.assertEqual((r["question"], r["answer"]), (qa.question, qa.answer))
      self.assertNotEqual(r["paraphrased_question"], r["question"])
      self.assertIn(qa.subject, r["paraphrased_question"])
      self.assertNotEqual(r["paraphrased_answer"], r["answer"])
      self.assertIn(qa.value, r["paraphrased_answer"])
      self.assertIn(qa.subject, r["paraphrased_answer"])
      self.assertLen(r["perturbed_answer"], 3)
      self.assertLen(set(r["perturbed_answer"]), 3)
      head = qa.answer[:qa.answer.rindex(qa.value)]
      for wrong in r["perturbed_answer"]:
        # The same sentence with another value of the attribute.
        self.assertTrue(wrong.startswith(head), wrong)
        self.assertNotIn(qa.value, wrong[len(head):])
    world = _jsonl(os.path.join(self.dest, "world_facts_perturbed.json"))
    self.assertEqual(world[0]["answer"], "The capital of France is Paris.")
    self.assertTrue(all(w.startswith("The capital of France is ")
                        and not w.endswith("Paris.")
                        for w in world[0]["perturbed_answer"]))

  def test_read_by_the_tofu_reader(self):
    cfg = pmc_config.get_config("smollm2")
    self.assertEqual(cfg.data.subset, "forget10")
    cfg.data.path = self.dest
    cfg.data.cache_dir = os.path.join(self.root, "cache")
    tasks = {t: sub for t, (sub, _, _) in tofu_evals.TASKS.items()}
    sp = tofu_data.read(cfg.data, perturbed_tasks=tasks)
    self.assertEqual(sp.rows["forget10"], 8)
    self.assertEqual(sp.rows["retain90"], 72)
    self.assertLen(sp.retain_eval, 72)               # <= 400: every row
    self.assertEqual([q.question for q in sp.forget_paraphrased],
                     [q.question for q in self.facts.forget_paraphrased])
    self.assertEqual({t: len(v) for t, v in sp.perturbed.items()},
                     {"retain": 72, "real_authors": 10, "world_facts": 10,
                      "forget": 8})

  def test_finetune_rows_answer_the_unlearning_prompt(self):
    from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
    cfg = pmc_config.get_config("smollm2")
    tok = pretrained.tokenizer("smollm2-135m-instruct")
    prompt = pmc_exp.tofu_prompt_fn(tok, pmc_exp.tofu_settings(cfg))
    chats = _jsonl(os.path.join(self.dest, "finetune.jsonl"))
    full = _jsonl(os.path.join(self.dest, "full.json"))
    for chat, row in zip(chats[:5], full):
      msgs = chat["messages"]
      self.assertEqual(msgs[0], {"role": "system", "content":
                                 cfg.tofu.system_prompt})
      self.assertEqual(msgs[1:], [
          {"role": "user", "content": row["question"]},
          {"role": "assistant", "content": row["answer"]}])
      rendered = tok.render_chat(msgs, add_generation_prompt=False)
      # The fine-tune's text is the unlearning prompt then the answer.
      self.assertTrue(rendered.startswith(prompt(row["question"])
                                          + row["answer"]), rendered)

  def test_retain_finetune_is_the_retain_split_alone(self):
    # TOFU's retain model: the same chat rows for retain90, none for the
    # forget authors.
    self.assertEqual(self.counts["finetune_retain90.jsonl"], 72)
    chats = _jsonl(os.path.join(self.dest, "finetune_retain90.jsonl"))
    full = _jsonl(os.path.join(self.dest, "finetune.jsonl"))
    retain = _jsonl(os.path.join(self.dest, "retain90.json"))
    forget = {r["question"] for r in _jsonl(
        os.path.join(self.dest, "forget10.json"))}
    self.assertEqual([c["messages"][1:] for c in chats], [
        [{"role": "user", "content": r["question"]},
         {"role": "assistant", "content": r["answer"]}] for r in retain])
    self.assertEqual({c["messages"][1]["content"] for c in full}
                     - {c["messages"][1]["content"] for c in chats}, forget)
    self.assertEqual({c["messages"][0]["content"] for c in chats},
                     {full[0]["messages"][0]["content"]})

  def test_pmc_needs_a_checkpoint(self):
    cfg = pmc_config.get_config("smollm2")
    cfg.data.path = self.dest
    with self.assertRaisesRegex(ValueError, "set --config.init_from"):
      pmc_exp.run(cfg, os.path.join(self.root, "wd"))


if __name__ == "__main__":
  absltest.main()
