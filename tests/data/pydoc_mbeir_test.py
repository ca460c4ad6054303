"""`jaxlab.data.pydoc_text.write_mbeir_copy`: real prose in M-BEIR's layout.

The copy is read back through the reranking paper's M-BEIR reader
(`jaxlab.data.mbeir`) and UniIR's instruction loader (ported in
`jaxlab.testing.mbeir_reference`); the pairs are checked against the
paragraphs they were cut from, the hard negatives against their topics,
and the `rerank:smollm2` preset's prompt against SmolLM2's tokenizer.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import numpy as np

from jaxlab.configs import rerank as rerank_config
from jaxlab.data import mbeir
from jaxlab.data import pydoc_text
from jaxlab.testing import mbeir_reference


def _jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


class PydocMbeirTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.counts = pydoc_text.write_mbeir_copy(cls.root)
    cls.pairs = pydoc_text.continuation_pairs(max_query_words=24,
                                              max_rest_words=40)
    task = "mbeir_pydoc_task0"
    cls.rows = {s: _jsonl(os.path.join(cls.root, "query", s,
                                       f"{task}_{s}.jsonl"))
                for s in ("train", "test")}
    cls.pool = _jsonl(os.path.join(cls.root, "cand_pool", "local",
                                   f"{task}_cand_pool.jsonl"))

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_rows_in_the_released_schema(self):
    self.assertEqual(self.counts, {s: len(r) for s, r in self.rows.items()})
    self.assertEqual(sum(self.counts.values()), len(self.pairs))
    self.assertGreater(self.counts["test"], 50)
    self.assertGreater(self.counts["train"], 2 * self.counts["test"])
    for r in self.rows["train"] + self.rows["test"]:
      self.assertEqual(set(r), {"qid", "query_txt", "query_img_path",
                                "query_modality", "pos_cand_list",
                                "neg_cand_list", "task_id"})
      self.assertEqual((r["query_modality"], r["task_id"]), ("text", 0))
      self.assertEqual(r["qid"].split(":")[0], "10")
    dids = [c["did"] for c in self.pool]
    self.assertLen(set(dids), len(self.pool))
    self.assertTrue(all(c["modality"] == "text" and c["img_path"] is None
                        for c in self.pool))

  def test_query_and_positive_are_a_paragraphs_start(self):
    from pydoc_data import topics  # pylint: disable=g-import-not-at-top
    pool = {c["did"]: c["txt"] for c in self.pool}
    for r in self.rows["test"][:40]:
      i = int(r["qid"].split(":")[1]) - 1
      pair = self.pairs[i]
      (pos,) = r["pos_cand_list"]
      paragraphs = [" ".join(p.split()) for p in pydoc_text._paragraphs(
          topics.topics[pair["topic"]])]
      # The query starts a paragraph; its positive is the same paragraph's
      # next sentences (right after the query unless it was capped).
      (par,) = [p for p in paragraphs if p.startswith(r["query_txt"])
                and pool[pos] in p]
      rest = par[len(r["query_txt"]):]
      if len(r["query_txt"].split()) < 24:
        self.assertTrue(rest.startswith(" " + pool[pos]), par)
        self.assertIn(r["query_txt"][-1], ".!?")   # a whole sentence
      else:
        self.assertIn(pool[pos], rest)

  def test_hard_negatives_share_the_topic_and_topics_split(self):
    topic = {f"10:{i + 1}": p["topic"] for i, p in enumerate(self.pairs)}
    n_hard = []
    for r in self.rows["train"] + self.rows["test"]:
      (pos,) = r["pos_cand_list"]
      self.assertNotIn(pos, r["neg_cand_list"])
      self.assertTrue(all(topic[d] == topic[pos] for d in r["neg_cand_list"]))
      n_hard.append(len(r["neg_cand_list"]))
    self.assertEqual(max(n_hard), 2)
    self.assertGreater(np.mean(n_hard), 1.5)
    train = {topic[r["qid"]] for r in self.rows["train"]}
    test = {topic[r["qid"]] for r in self.rows["test"]}
    self.assertEmpty(train & test)

  def test_read_by_the_mbeir_reader_with_uniirs_instructions(self):
    table = mbeir_reference.uniir_load_query_instructions(os.path.join(
        self.root, "instructions", "query_instructions.tsv"))
    self.assertEqual(table, mbeir.read_instructions(os.path.join(
        self.root, mbeir.INSTRUCTIONS_FILE)))
    self.assertEqual(list(table), ["10, text, text"])
    self.assertEqual(mbeir.instruction_mode(self.root, "auto"), "uniir")
    groups, n = mbeir.read_split(self.root, "test", seed=0)
    self.assertEqual(n, self.counts["test"])
    self.assertLen(groups, n)
    prompts = {mbeir.format_string(p) for p in pydoc_text.MBEIR_PROMPTS}
    self.assertTrue(all(g["instruction"] in prompts for g in groups))
    self.assertLen({g["instruction"] for g in groups}, 2)
    # Eight candidates a test query: its positive, its hard negatives and
    # other test queries' positives.
    triples, labels, tasks = mbeir.eval_lists(groups, 8, 0)
    self.assertEqual(labels.shape, (n, 8))
    np.testing.assert_array_equal(labels.sum(1), 1)
    self.assertEqual(set(tasks.tolist()), {"pydoc_task0"})

  def test_smollm2_preset_prompt_fits(self):
    from jaxlab.io import pretrained  # pylint: disable=g-import-not-at-top
    from jaxlab.models import reranker as rr  # pylint: disable=g-import-not-at-top
    c = rerank_config.get_config("smollm2")
    self.assertEqual(c.init_from, "smollm2-135m-instruct")
    self.assertEqual((c.data.source, c.data.split, c.data.eval_split),
                     ("hf", "train", "test"))
    self.assertEqual(c.cells, "sft/sft,cl/cl")
    tok = pretrained.tokenizer(c.init_from)
    # The label pieces are the words after "Answer:" in SmolLM2's BPE.
    self.assertEqual(tok.hf.tokenize("Answer: yes")[-1],
                     c.reranker.labels.yes_token)
    self.assertEqual(tok.hf.tokenize("Answer: no")[-1],
                     c.reranker.labels.no_token)
    self.assertNotEqual(tok.token_id(c.reranker.labels.yes_token),
                        tok.token_id(c.reranker.labels.no_token))
    groups, _ = mbeir.read_split(self.root, "test", seed=0)
    template = rr.PromptTemplate(system=c.prompt.system,
                                 template=c.prompt.template)
    cut = 0
    for g in groups:
      ids, _ = rr.encode_pair(g["instruction"], g["query"],
                              g["positives"][0], tok, template, 0,
                              int(c.prompt.max_len))
      full, _ = rr.encode_pair(g["instruction"], g["query"],
                               g["positives"][0], tok, template, 0, 10_000)
      self.assertLessEqual(len(ids), c.prompt.max_len)
      self.assertEqual(ids[-3:], full[-3:])   # "... Answer:" kept
      cut += len(full) > len(ids)
    # The budget cuts the end of about one positive in ten (the preset's
    # docstring says so); more would change the task.
    self.assertLess(cut, len(groups) / 8)


if __name__ == "__main__":
  absltest.main()
