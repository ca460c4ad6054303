"""Bring your own checkpoint: generate, chat fine-tune, RL, export.

A Qwen3-shaped checkpoint and a byte-level BPE tokenizer with a ChatML
template are written by the test (as the hub ships them). The `finetune`
config trains on a chat JSONL with the loss on assistant turns and exports
the merged weights with the tokenizer files (transformers loads the export
with our logits); `generate` renders chats and stops at every eos id; `rl`
runs GRPO with the checkpoint's tokenizer and template.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
from flax import nnx
import numpy as np

from jaxlab.configs import finetune
from jaxlab.configs import generate as generate_cfg
from jaxlab.configs import rl as rl_cfg
from jaxlab.experiments import generate as generate_exp
from jaxlab.experiments import results as results_lib
from jaxlab.experiments import rl as rl_exp
from jaxlab.experiments import train as train_exp
from jaxlab.data import pipeline
from jaxlab.data import tokenizers
from jaxlab.io import hf
from jaxlab.rewards import answer as answer_lib
from jaxlab.testing import hf_fixtures as hfx
from jaxlab.testing import tokenizer_fixtures as tfx

VOCAB = 416  # >= the tokenizer's 400 ids


@nnx.jit
def _logits(model, ids):
  """One compiled forward for both checkpoints (same shapes), not an
  eager op-by-op one per model."""
  return model(ids)

CHATS = [
    [{"role": "user", "content": f"What is {a} + {b}?"},
     {"role": "assistant", "content": f"{a} + {b} = {a + b}."}]
    for a in range(4) for b in range(3)
] + [[{"role": "system", "content": "Be terse."},
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello."},
      {"role": "user", "content": "Bye"},
      {"role": "assistant", "content": "Bye."}]]


class FinetuneExportTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hfx.make_chat_checkpoint(cls.ckpt, "qwen3", vocab_size=VOCAB, head_dim=8,
                             num_layers=1, init_std=0.05)
    cls.data = os.path.join(cls.root, "chats.jsonl")
    with open(cls.data, "w") as f:
      for messages in CHATS:
        f.write(json.dumps({"messages": messages}) + "\n")

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_loss_mask_is_on_assistant_targets_only(self):
    tok = tokenizers.from_pretrained(self.ckpt)
    rows = pipeline.chat_examples([CHATS[-1]], tok, seq_len=96)
    row = rows[0]
    targets = [int(t) for t, m in zip(row["targets"], row["loss_mask"]) if m]
    # Content + end-of-turn token (not the newline after it).
    self.assertEqual(tok.decode(targets), "Hello.<|im_end|>Bye.<|im_end|>")
    # Inputs are the rendered conversation, shifted by one.
    ids = tok.apply_chat_template(CHATS[-1], add_generation_prompt=False)
    n = len(ids) - 1
    np.testing.assert_array_equal(row["inputs"][:n], ids[:-1])
    np.testing.assert_array_equal(row["targets"][:n], ids[1:])

  def test_lora_finetune_export_loads_in_transformers(self):
    import transformers  # pylint: disable=g-import-not-at-top
    export = os.path.join(self.root, "export")
    cfg = finetune.get_config(
        f"tiny,init_from={self.ckpt},data={self.data},lora_rank=4,"
        f"export_dir={export}")
    out = train_exp.run(cfg, os.path.join(self.root, "work"))
    self.assertEqual(out["exported_to"], export)
    self.assertTrue(np.isfinite(out["loss"]))
    for name in ("config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "chat_template.jinja"):
      self.assertTrue(os.path.exists(os.path.join(export, name)), name)
    with open(os.path.join(export, "config.json")) as f:
      self.assertEqual(json.load(f)["architectures"], ["Qwen3ForCausalLM"])

    tok = transformers.AutoTokenizer.from_pretrained(export)
    ids = tok.apply_chat_template(CHATS[0][:1], add_generation_prompt=True,
                                  tokenize=True, return_dict=False)
    self.assertEqual(list(ids), tokenizers.from_pretrained(
        export).apply_chat_template(CHATS[0][:1]))
    ids = np.asarray([ids], np.int32)
    ref = hfx.hf_logits(hfx.load_hf_model(export), ids)
    ours = np.asarray(_logits(hf.load(export)[0], ids))
    self.assertLess(np.abs(ours - ref).max(), 1e-4)
    # LoRA was trained and merged: the export differs from the start.
    before = np.asarray(_logits(hf.load(self.ckpt)[0], ids))
    self.assertGreater(np.abs(before - ours).max(), 1e-3)

  def test_generate_renders_chats_and_stops_at_every_eos_id(self):
    chats = os.path.join(self.root, "ask.jsonl")
    with open(chats, "w") as f:
      f.write(json.dumps({"messages": CHATS[0][:1]}) + "\n")
    ckpt = os.path.join(self.root, "gen_ckpt")
    shutil.copytree(self.ckpt, ckpt)
    cfg = generate_cfg.get_config()
    cfg.update(init_from=ckpt, tokenizer="auto", chats=chats, prompts=(),
               max_new_tokens=6, temperature=0.0, samples_per_prompt=1)

    def generate(name):
      generate_exp.run(cfg, os.path.join(self.root, name))
      with open(os.path.join(self.root, name, "samples.jsonl")) as f:
        return [json.loads(line) for line in f]

    tok = tokenizers.from_pretrained(ckpt)
    free = generate("free")[0]
    self.assertEqual(free["prompt_ids"], tok.apply_chat_template(CHATS[0][:1]))
    self.assertEqual(free["prompt"], CHATS[0][:1])
    # A second eos id in generation_config.json (as Qwen ships
    # <|endoftext|> beside <|im_end|>): generation stops at its first use.
    stop = free["completion_ids"][2]
    with open(os.path.join(ckpt, "generation_config.json"), "w") as f:
      json.dump({"eos_token_id": [tok.eos_id, stop]}, f)
    row = generate("stopped")[0]
    first = free["completion_ids"].index(stop)
    self.assertEqual(row["completion_ids"], free["completion_ids"][:first + 1])
    self.assertTrue(row["stopped_on_eos"])

  def test_rl_on_the_checkpoint_with_its_template_and_eos_ids(self):
    data = os.path.join(self.root, "qa.jsonl")
    with open(data, "w") as f:
      for a in range(5):
        f.write(json.dumps({"prompt": f"What is {a} + 1?",
                            "answer": str(a + 1)}) + "\n")
    work = os.path.join(self.root, "rl")
    cfg = rl_cfg.get_config(f"tiny,init_from={self.ckpt},data={data},steps=2")
    self.assertEqual(cfg.data.tokenizer, "auto")
    out = rl_exp.run(cfg, work)
    self.assertEqual(out["train_questions"], 4)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    # The provenance every experiment's results.json carries.
    self.assertEqual(res["experiment"], "rl")
    self.assertEqual(res["schema"], results_lib.SCHEMA_VERSION)
    self.assertTrue(res["command"])
    self.assertEqual(set(res["git"]), {"commit", "dirty"})
    self.assertIn("jax", res["packages"])
    self.assertEqual(res["config"], results_lib.to_jsonable(cfg.to_dict()))
    self.assertEqual(res["train_questions"], 4)
    tok = tokenizers.from_pretrained(self.ckpt)
    encode = rl_exp.encoder(tok, chat=True)
    self.assertEqual(encode({"prompt": "Hi"}), tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}]))
    with open(os.path.join(work, "rollouts.jsonl")) as f:
      rows = [json.loads(line) for line in f]
    self.assertLen(rows, 2 * 2 * 4)  # steps x prompts x group
    for row in rows:
      ids = row["completion_ids"]
      stopped = ids[-1] in tok.eos_ids
      self.assertTrue(stopped or len(ids) == cfg.grpo.max_new_tokens)
      self.assertNotIn(tok.eos_id, ids[:-1])
      # The reward is the answer check of this completion's own question.
      self.assertEqual(row["completion"], tok.decode(
          [t for t in ids if t not in tok.eos_ids]))
      self.assertEqual(row["answer"], str(row["question"] + 1))
      self.assertEqual(row["reward"], answer_lib.answer_reward(
          row["completion"], row["answer"]))

  def test_chat_source_needs_a_checkpoint_tokenizer(self):
    cfg = finetune.get_config(f"tiny,data={self.data}")
    with self.assertRaisesRegex(ValueError, "no checkpoint is set"):
      train_exp.run(cfg, os.path.join(self.root, "bad"))


class Qwen3ChatFinetuneTest(absltest.TestCase):
  """Fine-tuning on multi-turn chats with Qwen3's real template."""

  def test_finetune_on_multi_turn_thinking_and_tool_chats(self):
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    ckpt = os.path.join(root, "ckpt")
    tfx.make_qwen3_tokenizer(ckpt)
    hfx.make_hf_checkpoint(ckpt, "qwen3", vocab_size=VOCAB, head_dim=8,
                           num_layers=1, init_std=0.05)
    chats = [[
        {"role": "user", "content": f"What is {a} + 1?"},
        {"role": "assistant", "reasoning_content": f"{a} plus one.",
         "content": f"{a + 1}."},
        {"role": "user", "content": "And doubled?"},
        {"role": "assistant",
         "content": f"<think>\nTwice {a + 1}.\n</think>\n\n{2 * a + 2}."},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "Welcome."}] for a in range(8)]
    tool = {"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {}}}}
    tool_chat = [{"role": "user", "content": "Add 1 and 2."},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"function": {"name": "add",
                                   "arguments": {"a": 1, "b": 2}}}]},
                 {"role": "tool", "content": "3"},
                 {"role": "assistant", "content": "3."}]
    data = os.path.join(root, "chats.jsonl")
    with open(data, "w") as f:
      for messages in chats:
        f.write(json.dumps({"messages": messages}) + "\n")
      f.write(json.dumps({"messages": tool_chat, "tools": [tool]}) + "\n")
    cfg = finetune.get_config(f"tiny,init_from={ckpt},data={data},"
                              "lora_rank=4")
    # As --config.data.chat_template_kwargs='{"enable_thinking": false}'.
    cfg.data.chat_template_kwargs = '{"enable_thinking": false}'
    out = train_exp.run(cfg, os.path.join(root, "work"))
    self.assertTrue(np.isfinite(out["loss"]))
    tok = tokenizers.from_pretrained(ckpt)
    rows = pipeline.chat_examples([chats[3]], tok, seq_len=128,
                                  template_kwargs={"enable_thinking": False})
    targets = [int(t) for t, m in zip(rows[0]["targets"],
                                      rows[0]["loss_mask"]) if m]
    self.assertEqual(tok.decode(targets), (
        "4.<|im_end|>8.<|im_end|>"  # earlier turns: thinking dropped
        "Welcome.<|im_end|>"))


if __name__ == "__main__":
  absltest.main()
