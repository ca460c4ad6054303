"""`lestd:paper,short` on WikiText-2 as released, from a tiny checkpoint.

A random transformers Llama checkpoint (MHA: LeSTD stacks K and V per query
head) with a tiny BPE tokenizer beside it, and a WikiText-layout copy
written here: `wikitext-2-raw-v1/test-00000-of-00001.parquet` with the one
column `text` (Salesforce/wikitext on the Hub, tree main/wikitext-2-raw-v1:
one line of an article per row, blank rows between paragraphs, " = Title = "
headings). The run compresses the checkpoint's attention by LeSTD, dense
Tucker and SVD, scores sliding-window perplexity, and exports the LeSTD model
as a HF checkpoint; the perplexities are checked against transformers'
own forward with the stride loop of Hugging Face's "Perplexity of
fixed-length models" guide, on the checkpoint and on the exported one.
"""

import json
import math
import os
import shutil
import tempfile

import datasets
import numpy as np
import torch
import transformers
from absl.testing import absltest

from jaxlab.configs import lestd as lestd_config
from jaxlab.experiments import lestd
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures

TEXT = [
    "", " = Robert Boulter = \n", "",
    " Robert Boulter is an English film , television and theatre actor . "
    "He had a guest role in the television series The Bill in 2000 . \n",
    " In 2006 he starred alongside Whishaw in the play Citizenship . \n",
    "", " = = Career = = \n", "",
    " In 2003 Boulter landed a role as Craig in the episode Teddy 's Story "
    "of the series The Long Firm . \n",
    " He appeared in the television series Judge John Deed in 2002 . \n",
    " = Du Fu = \n", " Du Fu was a prominent Chinese poet . \n",
]


def hf_stride_nll(model, ids: np.ndarray, window: int, stride: int
                  ) -> tuple[float, int]:
  """(summed NLL, tokens scored): Hugging Face's perplexity guide
  (docs/transformers perplexity.md) loop over full windows: each window
  scores the targets not scored by the previous one (labels -100 before)."""
  nll, count, prev_end = 0.0, 0, 0
  for begin in range(0, len(ids) - window + 1, stride):
    end = begin + window
    trg_len = end - prev_end
    x = torch.tensor(ids[None, begin:end], dtype=torch.long)
    labels = x.clone()
    labels[:, :-trg_len] = -100
    with torch.no_grad():
      logits = model(x).logits[0, :-1].double()
    logp = torch.log_softmax(logits, -1)
    tgt = labels[0, 1:]
    keep = tgt != -100
    nll -= float(logp[keep].gather(-1, tgt[keep][:, None]).sum())
    count += int(keep.sum())
    prev_end = end
  return nll, count


class LestdWikitextTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=400,
                                     hidden_size=32, num_layers=2, num_heads=4,
                                     num_kv_heads=4, init_std=0.2,
                                     max_position_embeddings=64)
    cls.data = os.path.join(cls.root, "wikitext")
    os.makedirs(os.path.join(cls.data, "wikitext-2-raw-v1"))
    datasets.Dataset.from_dict({"text": TEXT}).to_parquet(os.path.join(
        cls.data, "wikitext-2-raw-v1", "test-00000-of-00001.parquet"))
    c = lestd_config.get_config("paper,short")
    c.init_from = cls.ckpt
    c.data.path = cls.data
    c.data.cache_dir = os.path.join(cls.root, "hf_cache")
    c.compress.update(ratios=(0.4, 0.8), export_ratio=0.4)
    c.ppl.update(seq_len=16, stride=8, batch_size=4)
    cls.config = c
    cls.work = os.path.join(cls.root, "run")
    lestd.run(c, cls.work)
    with open(os.path.join(cls.work, "results.json")) as f:
      cls.res = json.load(f)
    cls.extra = cls.res["extra"]

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_reads_the_released_layout_and_counts_rows(self):
    c = lestd_config.get_config("paper")
    self.assertEqual((c.data.source, c.data.path, c.data.subset,
                      c.data.eval_split), ("hf", "Salesforce/wikitext",
                                           "wikitext-2-raw-v1", "test"))
    data = self.res["data"]
    self.assertEqual(data["rows"], {"test": 8})  # short: 8 of the 12 rows
    self.assertEqual((data["source"], data["subset"]),
                     ("hf", "wikitext-2-raw-v1"))
    self.assertLen(data["digest"], 64)
    tok = pretrained.tokenizer(self.ckpt)
    text = "\n\n".join(TEXT[:8])
    ids = tok.encode(text, add_bos=True)
    self.assertEqual(ids, tok.hf(text)["input_ids"])  # transformers' call
    self.assertEqual(self.extra["eval"]["tokens"], len(ids))

  def test_dense_perplexity_is_transformers_stride_loop(self):
    tok = pretrained.tokenizer(self.ckpt)
    ids = np.asarray(tok.encode("\n\n".join(TEXT[:8]), add_bos=True))
    self.assertGreater(len(ids), 24)  # more than one window
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        self.ckpt, torch_dtype=torch.float32).eval()
    nll, n = hf_stride_nll(ref, ids, 16, 8)
    ev = self.extra["eval"]
    self.assertEqual((ev["window"], ev["stride"]), (16, 8))
    self.assertEqual(n, 15 + 8 * ((len(ids) - 16) // 8))
    dense = self.extra["per_seed"][0]["ppl_dense"]
    self.assertAlmostEqual(dense, math.exp(nll / n), delta=1e-4 * dense)

  def test_methods_ratios_and_export(self):
    rec = self.extra["per_seed"][0]
    self.assertEqual(set(rec["ppl"]), {"lestd", "tucker", "svd"})
    for m in rec["ppl"]:
      self.assertEqual(set(rec["ppl"][m]), {"r40", "r80"})
      for r in (0.4, 0.8):
        for info in self.extra["plans"][f"{m}@{r:g}"]:
          self.assertLessEqual(info["ratio"], r + 1e-9)
    # Compression changes the function: SVD at 0.4 keeps rank 6 of 32.
    self.assertNotAlmostEqual(rec["ppl"]["svd"]["r40"], rec["ppl_dense"],
                              places=3)
    exp = self.extra["export"]
    self.assertEqual((exp["method"], exp["ratio"]), ("lestd", 0.4))
    self.assertLess(exp["max_abs_logit_diff"], 1e-4 * max(
        1.0, exp["logit_scale"]))
    # The exported checkpoint, run by transformers, has LeSTD's perplexity;
    # its tokenizer is the checkpoint's.
    tok = pretrained.tokenizer(self.ckpt)
    ids = np.asarray(tok.encode("\n\n".join(TEXT[:8]), add_bos=True))
    self.assertEqual(list(ids), pretrained.tokenizer(exp["path"]).encode(
        "\n\n".join(TEXT[:8]), add_bos=True))
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        exp["path"], torch_dtype=torch.float32).eval()
    nll, n = hf_stride_nll(ref, ids, 16, 8)
    want = rec["ppl"]["lestd"]["r40"]
    self.assertAlmostEqual(want, math.exp(nll / n), delta=1e-4 * want)
    self.assertNotAlmostEqual(want, rec["ppl_dense"], places=3)


if __name__ == "__main__":
  absltest.main()
