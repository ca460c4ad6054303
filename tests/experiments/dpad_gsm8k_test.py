"""`dpad:paper,short` on a GSM8K Hub-layout copy with tiny LLaDA / Dream.

GSM8K's released layout (huggingface.co/datasets/openai/gsm8k, README
`configs:` metadata since commit 60b4b82 "Add socratic data files"):
config `main` with `main/{split}-00000-of-00001.parquet`, columns
`question` and `answer`, the answer's last line `#### <number>` (the same
copy as tests/experiments/calibration_gsm8k_test.py writes).

LLaDA: a tiny random Llama checkpoint (with the tiny ChatML tokenizer
beside it) rewritten under LLaDA's tensor names and config.json fields
(`modeling_llada.py`, as tests/io/hf_diffusion_test.py does; mask and EOS
ids in config.json as LLaDA-8B-Instruct has them). Dream: a tiny Qwen2
checkpoint relabelled `DreamModel` (Dream's config.json: `mask_token_id`,
`eos_token_id`). The accuracy is checked against lm-evaluation-harness's
scorer ported in tests/evals/gsm8k_test.py (`ref_score`) on the saved
completions, and the vanilla completions against decoding the harness's
prompt text directly with `jaxlab.decoding.diffusion.generate`.
"""

import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from jaxlab.configs import dpad as dpad_cfg
from jaxlab.data import hf_tokenizer
from jaxlab.decoding import diffusion
from jaxlab.evals import gsm8k
from jaxlab.experiments import dpad
from jaxlab.io import pretrained
from jaxlab.testing import diffusion_fixtures
from jaxlab.testing import gsm8k_reference
from jaxlab.testing import hf_fixtures as hfx
from jaxlab.testing import tokenizer_fixtures

MASK = diffusion_fixtures.MASK
ROWS = [
    ("Natalia sold clips to 48 of her friends in April, and then she sold "
     "half as many clips in May. How many clips did she sell?",
     "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n48+24 = "
     "<<48+24=72>>72\n#### 72"),
    ("Weng earns $12 an hour. She worked 50 minutes. How much did she earn?",
     "12/60 = $<<12/60=0.2>>0.2 per minute.\n0.2 x 50 = $<<0.2*50=10>>10."
     "\n#### 10"),
    ("A shop sold 1,000 pens and 250 more. How many pens?",
     "1000 + 250 = <<1000+250=1250>>1250\n#### 1,250"),
    ("It was 3 degrees and fell by 10. What is it now?",
     "3 - 10 = <<3-10=-7>>-7\n#### -7"),
    ("Tom has 5 apples and eats 2. How many are left?",
     "5 - 2 = <<5-2=3>>3\n#### 3"),
    ("A book costs $8 and a pen $2. What do 2 books and 1 pen cost?",
     "2 * 8 + 2 = <<2*8+2=18>>18\n#### 18"),
    ("Sam runs 3 miles a day for 7 days. How far does he run?",
     "3 * 7 = <<3*7=21>>21\n#### 21"),
    ("There are 9 birds and 4 fly away. How many remain?",
     "9 - 4 = <<9-4=5>>5\n#### 5"),
    ("A class has 20 students; half are girls. How many girls?",
     "20 / 2 = <<20/2=10>>10\n#### 10"),
    ("Ann reads 12 pages a day. How many in 3 days?",
     "12 * 3 = <<12*3=36>>36\n#### 36"),
]
class DpadGsm8kTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = staticmethod(hfx.inductor_cleanup())
    cls.root = tempfile.mkdtemp()
    cls.data = os.path.join(cls.root, "gsm8k")
    gsm8k_reference.write_gsm8k(cls.data, {"train": ROWS[8:], "test": ROWS})
    # EOS: the tokenizer's <|im_end|>, as LLaDA's eos is a tokenizer id.
    tok_dir = tokenizer_fixtures.make_hf_tokenizer(
        os.path.join(cls.root, "tok"))
    cls.eos = hf_tokenizer.HFTokenizer(tok_dir).eos_id
    cls.llada = diffusion_fixtures.make_llada(os.path.join(cls.root, "llada"), cls.eos)
    cls.dream = diffusion_fixtures.make_dream(os.path.join(cls.root, "dream"), cls.eos)
    cls.ref_score = staticmethod(gsm8k_reference.ref_score)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    cls.cleanup()
    super().tearDownClass()

  def _config(self, ckpt, variants=None):
    c = dpad_cfg.get_config("paper,short")
    c.init_from = ckpt
    c.data.path = self.data
    c.data.subset = "main"
    c.data.cache_dir = os.path.join(self.root, "hf_cache")
    # One batch of the 8 rows: one canvas shape (one compile) per variant.
    c.decode.update(gen_lens=(32,), block_len=16, batch=8, dtype="float32")
    c.decode.dpad.window = 16
    if variants:
      c.decode.variants = variants
    return c

  def _check_run(self, ckpt, workdir, variants=None):
    c = self._config(ckpt, variants)
    res = dpad.run(c, workdir)
    with open(os.path.join(workdir, "results.json")) as f:
      saved = json.load(f)
    # short: 8 test rows; 1-shot (the paper's long setting): 1 train row.
    self.assertEqual(saved["data"]["rows"], {"test": 8, "train": 1})
    self.assertEqual((saved["data"]["source"], saved["data"]["path"],
                      saved["data"]["subset"]), ("hf", self.data, "main"))
    with open(os.path.join(workdir, "completions.jsonl")) as f:
      records = [json.loads(line) for line in f]
    self.assertEqual([(r["question"], r["answer"]) for r in records],
                     ROWS[:8])
    metrics = res["per_seed"][0]["decode"]["32"]
    self.assertEqual(list(metrics), list(c.decode.variants))
    for name, m in metrics.items():
      texts = [r["completions"][f"seed0/32/{name}"] for r in records]
      for key, filt in (("strict", "strict-match"),
                        ("flexible", "flexible-extract")):
        want = np.mean([self.ref_score(t, a, filt)
                        for t, (_, a) in zip(texts, ROWS[:8])])
        self.assertAlmostEqual(m[key], want, msg=(name, key))
      self.assertGreater(m["latency_s"], 0.0)
      # NFE per sample: 2 blocks of 16; vanilla one token per step.
      self.assertBetween(m["nfe"], 1.0, 32.0)
      if name == "vanilla":
        self.assertEqual(m["nfe"], 32.0)
    return c, res, records

  def _direct_vanilla(self, ckpt, shift_logits):
    """The vanilla completions decoded here from the harness prompt text."""
    model, _ = pretrained.load(ckpt)
    tok = pretrained.tokenizer(ckpt)
    shot = f"Question: {ROWS[8][0]}\nAnswer: {ROWS[8][1]}\n\n"
    prompts = [tok.encode(f"{shot}Question: {q}\nAnswer:", add_bos=True)
               for q, _ in ROWS[:8]]
    out = []
    res = diffusion.generate(model, prompts, gen_len=32,  # the run's batch
                             block_len=16, mask_id=MASK, eos_id=self.eos,
                             shift_logits=shift_logits)
    for row in res.tokens:
      ids = [int(t) for t in diffusion.truncate_at_eos(row, self.eos)
             if t != MASK and t < tok.vocab_size]
      out.append(gsm8k.cut(tok.decode(ids, skip_special_tokens=True)))
    return out

  def test_llada_paper_short(self):
    c, res, records = self._check_run(self.llada,
                                      os.path.join(self.root, "llada_run"))
    self.assertEqual(tuple(c.decode.variants),
                     ("vanilla", "+early stop", "+DPad",
                      "+threshold+prefix cache", "+all"))
    self.assertEqual((res["mask_id"], res["eos_id"], res["shift_logits"]),
                     (MASK, self.eos, False))
    self.assertEqual([r["completions"]["seed0/32/vanilla"] for r in records],
                     self._direct_vanilla(self.llada, False))

  def test_dream_paper_short(self):
    _, res, records = self._check_run(
        self.dream, os.path.join(self.root, "dream_run"),
        variants=("vanilla", "+all"))
    self.assertTrue(res["shift_logits"])
    self.assertEqual([r["completions"]["seed0/32/vanilla"] for r in records],
                     self._direct_vanilla(self.dream, True))

  def test_accuracy_on_chosen_completions(self):
    """The scoring wiring on completions chosen to cover the harness's cases
    (a random tiny model rarely writes the right number)."""
    tok = pretrained.tokenizer(self.llada)
    chosen = ["It is 72.\n#### 72", "$10.", "#### 1250", "it is 7",
              "3\nQuestion: 5", "#### 18.00", "21 miles", "no idea"]

    def fake_decode(model, prompts, *, gen_len, **kwargs):
      del model, kwargs
      rows = [tok.encode(t) + [self.eos] * gen_len for t in chosen]
      self.assertLen(prompts, 8)
      return (np.array([r[:gen_len] for r in rows], np.int32),
              {"latency_s": 0.5, "nfe": 7.0, "tokens_processed": 1.0,
               "flops": 1.0, "compile_s": 0.0})

    c = self._config(self.llada, ("vanilla",))
    with mock.patch.object(dpad.diffusion_decode, "decode_prompts",
                           fake_decode):
      res = dpad.run(c, os.path.join(self.root, "chosen"))
    m = res["per_seed"][0]["decode"]["32"]["vanilla"]
    # By hand: strict matches "#### 72" and "#### 1250" (target "1,250");
    # flexible also "$10.", "3\n" (cut at "Question:") and "21", not
    # "18.00" (not "18" as a string) or "7" (target -7).
    self.assertEqual((m["strict"], m["flexible"]), (2 / 8, 5 / 8))
    self.assertEqual((m["latency_s"], m["nfe"], m["speedup"]), (0.5, 7.0, 1.0))

  def test_errors_are_named(self):
    c = self._config(self.llada)
    c.init_from = ""
    with self.assertRaisesRegex(ValueError, "needs a diffusion LM"):
      dpad.run(c, os.path.join(self.root, "no_ckpt"))
    with self.assertRaisesRegex(ValueError, "columns 'question' and 'answer'"):
      dpad.gsm8k_rows([{"problem": "1 + 1?", "solution": "2"}])
    plain = hfx.make_chat_checkpoint(os.path.join(self.root, "plain"))
    with self.assertRaisesRegex(ValueError, "no mask_token_id"):
      dpad.run(self._config(plain), os.path.join(self.root, "plain_run"))


if __name__ == "__main__":
  absltest.main()
