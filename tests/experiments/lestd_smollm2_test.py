"""`lestd:smollm2` end to end on a tiny grouped-query checkpoint.

The preset's real run compresses SmolLM2-135M-Instruct (9 query heads
sharing 3 KV heads) and scores perplexity on a local WikiText-layout copy
of Python's documentation (`jaxlab.data.pydoc_text`). Here the same preset
runs on a random transformers Llama checkpoint with 4 query heads sharing 2
KV heads (tiny BPE tokenizer beside it) and 12 rows of that copy, written
by `pydoc_text.write_local_copy` in WikiText-2's released layout
(Salesforce/wikitext, tree main/wikitext-2-raw-v1:
`<subset>/test-00000-of-00001.parquet`, one column `text`). Checked: the
rows read are counted, the per-window-set perplexities (the tables'
"seeds") equal transformers' own forward on the same windows, the pooled
value is their token-weighted combination, the paired comparisons are
declared, and every method keeps the model's KV heads.
"""

import json
import math
import os
import shutil
import tempfile

import datasets
import numpy as np
import torch
from absl.testing import absltest

from jaxlab.compression import lestd as lestd_lib
from jaxlab.configs import lestd as lestd_config
from jaxlab.data import pydoc_text
from jaxlab.experiments import lestd
from jaxlab.experiments.report import render
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures


class LestdSmollm2Test(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=400,
                                     hidden_size=32, num_layers=2, num_heads=4,
                                     num_kv_heads=2, init_std=0.2,
                                     max_position_embeddings=64)
    cls.data = os.path.join(cls.root, "pydoc")
    cls.parquet = pydoc_text.write_local_copy(cls.data)
    c = lestd_config.get_config("smollm2")
    cls.preset = c.copy_and_resolve_references()
    c.init_from = cls.ckpt
    c.data.path = cls.data
    c.data.max_rows = 12
    c.data.cache_dir = os.path.join(cls.root, "hf_cache")
    c.ppl.update(seq_len=16, stride=16, batch_size=4, max_windows=9,
                 groups=3)
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

  def test_preset(self):
    c = self.preset
    self.assertEqual((c.init_from, c.data.source, c.data.subset,
                      c.data.eval_split, c.lestd.gqa),
                     ("smollm2-135m-instruct", "hf", "pydoc-topics", "test",
                      "group"))
    self.assertEqual(tuple(c.compress.ratios), (0.2, 0.4))
    self.assertEqual(set(c.compress.methods), {"lestd", "tucker", "svd"})
    self.assertEqual((c.ppl.seq_len, c.ppl.stride), (256, 256))
    self.assertGreaterEqual(c.ppl.groups, 3)

  def test_layout_and_rows_counted(self):
    self.assertEqual(os.path.relpath(self.parquet, self.data),
                     os.path.join("pydoc-topics",
                                  "test-00000-of-00001.parquet"))
    rows = datasets.Dataset.from_parquet(self.parquet)
    self.assertEqual(rows.column_names, ["text"])
    self.assertEqual(rows["text"], pydoc_text.rows())
    # WikiText's heading rows (" = Title = ") open each topic
    self.assertRegex(rows["text"][0], r"^ = .+ = \n$")
    data = self.res["data"]
    self.assertEqual(data["rows"], {"test": 12})
    self.assertEqual((data["source"], data["subset"]), ("hf", "pydoc-topics"))
    self.assertEqual(self.res["experiment"], "lestd_smollm2")

  def test_window_sets_are_transformers_perplexities(self):
    tok = pretrained.tokenizer(self.ckpt)
    ids = np.asarray(tok.encode("\n\n".join(pydoc_text.rows()[:12]),
                                add_bos=True))
    ev = self.extra["eval"]
    self.assertGreater(len(ids), 9 * 16)  # the text outlasts the 9 windows
    self.assertEqual((ev["windows"], ev["groups"], ev["tokens"]),
                     (9, 3, 9 * 16))
    ref = hf_fixtures.load_hf_model(self.ckpt)
    win_nll = []
    for w in range(9):  # disjoint windows: 15 targets each
      x = torch.tensor(ids[None, 16 * w:16 * w + 16], dtype=torch.long)
      with torch.no_grad():
        logp = torch.log_softmax(ref(x).logits[0, :-1].double(), -1)
      win_nll.append(-float(logp.gather(-1, x[0, 1:, None]).sum()))
    win_nll = np.asarray(win_nll)
    rec = self.extra["per_seed"][0]
    want = [math.exp(win_nll[3 * k:3 * k + 3].sum() / 45) for k in range(3)]
    np.testing.assert_allclose(rec["ppl_sets"]["dense"], want, rtol=1e-4)
    np.testing.assert_allclose(rec["ppl_dense"],
                               math.exp(win_nll.sum() / 135), rtol=1e-4)
    # the table's cells: seed k = window set k
    table = render.find_table(self.res, "perplexity")
    rows = {r["label"]: r["cells"] for r in table["rows"]}
    self.assertEqual(rows["LeSTD"]["r20"]["seeds"], [0, 1, 2])
    np.testing.assert_allclose(rows["dense"]["r40"]["values"], want,
                               rtol=1e-4)
    # the pooled perplexity is the token-weighted combination of the sets'
    for key in ("lestd@0.2", "svd@0.4", "tucker@0.4"):
      per = np.log(rec["ppl_sets"][key])
      m, r = key.split("@")
      pooled = rec["ppl"][m][f"r{int(round(100 * float(r)))}"]
      self.assertAlmostEqual(math.log(pooled), per.mean(), places=6)

  def test_comparisons_methods_and_gqa_kept(self):
    comps = {(c["a"], c["b"], c["column"]) for c in self.res["comparisons"]}
    self.assertEqual(comps, {("LeSTD", b, k) for b in ("SVD", "dense Tucker")
                             for k in ("r20", "r40")})
    md = render.render_table(self.res, "perplexity")
    self.assertIn("| LeSTD − SVD | ratio 0.2 |", md)
    rec = self.extra["per_seed"][0]
    for m in ("lestd", "tucker", "svd"):
      for r in (0.2, 0.4):
        self.assertNotAlmostEqual(rec["ppl"][m][f"r{int(100 * r)}"],
                                  rec["ppl_dense"], places=4)
        for info in self.extra["plans"][f"{m}@{r:g}"]:
          self.assertLessEqual(info["ratio"], r + 1e-9)
          if m != "svd":
            self.assertLessEqual(info["ranks"][2], 6)  # 2r+2 slots, r = 2
    # the compressed model keeps 2 KV heads (its KV cache is unchanged)
    model, _ = pretrained.load(self.ckpt)
    comp, _ = lestd.compress(model, "lestd", 0.4, self.config,
                             [{} for _ in model.layers])
    attn = comp.layers[0].attn
    self.assertIsInstance(attn, lestd_lib.TuckerAttention)
    self.assertEqual((attn.num_heads, attn.num_kv_heads), (4, 2))


if __name__ == "__main__":
  absltest.main()
