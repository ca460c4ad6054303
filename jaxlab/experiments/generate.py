"""Generation experiment: load a checkpoint, sample continuations, save them.

`run(config, workdir)` (see jaxlab/configs/generate.py) loads the checkpoint
`config.init_from` names with `jaxlab.io.pretrained.load` (a shipped name, a
HF directory, a .gguf file, a jaxlab trainer workdir or a Hub id; a random
decoder when it is empty), encodes the text prompts and renders the chat
conversations (`config.chats`, JSONL) with the checkpoint's chat template,
generates with `jaxlab.decoding.sampler.generate` (stopping at every eos id
of the checkpoint's generation config) and writes:

  WORKDIR/samples.jsonl  one row per (prompt, sample): prompt text/ids,
                         completion ids/text, per-token sampling and model
                         log-probs, whether it stopped on eos
  WORKDIR/results.json   counts, mean completion length, mean model
                         log-prob per token, generation tokens/s, with
                         the command, commit, versions and config
                         (`jaxlab.experiments.results` schema)
"""

import json
import os
import time
from typing import Any

import jax
from flax import nnx

from jaxlab.data import tokenizers
from jaxlab.decoding import sampler
from jaxlab.experiments import results as results_lib
from jaxlab.io import pretrained
from jaxlab.models import decoder as dec
from jaxlab.models import registry as model_registry


def _tokenizer(config):
  name = config.tokenizer
  if name == "none":
    return None
  if name == "auto" and config.init_from:
    return pretrained.tokenizer(config.init_from)  # the checkpoint's own
  if name in ("byte", "auto"):
    return tokenizers.build(name, checkpoint="", field="config.tokenizer")
  if os.path.isdir(name):  # a checkpoint directory's tokenizer
    return tokenizers.from_pretrained(name)
  if not os.path.exists(name):
    raise FileNotFoundError(
        f"config.tokenizer={name!r}: not 'byte', 'auto' or 'none' and no "
        "such sentencepiece model file or tokenizer directory")
  return tokenizers.SentencePieceTokenizer(name)


def _prompts(config, tok) -> tuple[list[list[int]], list[Any]]:
  """(token ids, what to record as the prompt) for text prompts + chats."""
  if tok is None:
    if config.chats:
      raise ValueError("config.chats needs a tokenizer with a chat template "
                       "(config.tokenizer='auto')")
    return [list(p) for p in config.prompt_ids], [None] * len(
        config.prompt_ids)
  texts = list(config.prompts)
  ids = [tok.encode(t, add_bos=True) for t in texts]
  if config.chats:
    if not hasattr(tok, "apply_chat_template"):
      raise ValueError(f"config.chats needs a checkpoint tokenizer with a "
                       f"chat template (config.tokenizer='auto'), got "
                       f"{type(tok).__name__}")
    from jaxlab.data import sources  # pylint: disable=g-import-not-at-top
    kwargs = tokenizers.template_kwargs(
        config.get("chat_template_kwargs"), field="config.chat_template_kwargs")
    for row in sources.read_chat_rows(config.chats):
      ids.append(tok.apply_chat_template(
          row["messages"], add_generation_prompt=True,
          **tokenizers.row_template_kwargs(row, kwargs)))
      texts.append(row["messages"])
  if not ids:
    raise ValueError("nothing to generate: config.prompts and config.chats "
                     "are both empty")
  return ids, texts


def _model(config, tok) -> tuple[Any, dec.DecoderConfig]:
  if config.init_from:
    return pretrained.load(config.init_from, dtype=config.dtype)
  if not config.model.vocab_size and tok is None:
    raise ValueError("config.model.vocab_size=0 needs a tokenizer; set "
                     "config.model.vocab_size or config.tokenizer")
  cfg = model_registry.decoder_config(
      config.model, vocab_size=None if tok is None else tok.vocab_size)
  return dec.Decoder(cfg, rngs=nnx.Rngs(config.seed)), cfg


def run(config, workdir: str) -> dict[str, Any]:
  start_time = time.time()
  os.makedirs(workdir, exist_ok=True)
  tok = _tokenizer(config)
  model, cfg = _model(config, tok)
  prompt_ids, texts = _prompts(config, tok)
  for i, ids in enumerate(prompt_ids):
    bad = [t for t in ids if not 0 <= t < cfg.vocab_size]
    if bad:
      raise ValueError(f"prompt {i} has token ids {bad} outside the model "
                       f"vocabulary [0, {cfg.vocab_size})")
  eos = config.eos_id if config.eos_id >= 0 else (
      tok.eos_id if tok is not None else None)
  # Every end-of-sequence id of the checkpoint (generation_config.json may
  # list several, e.g. <|im_end|> and <|endoftext|>).
  stop_ids = tuple(getattr(tok, "eos_ids", ())) if config.eos_id < 0 else ()
  stops = set(stop_ids) | ({eos} if eos is not None else set())
  n = config.samples_per_prompt
  batch = [p for p in prompt_ids for _ in range(n)]
  kw = dict(max_new_tokens=config.max_new_tokens,
            temperature=config.temperature, top_k=config.top_k or None,
            top_p=config.top_p if config.top_p < 1.0 else None, eos_id=eos,
            key=jax.random.key(config.seed), stop_ids=stop_ids,
            pad_id=tok.pad_id if tok is not None else 0)
  sampler.generate(model, batch, **kw)  # compile
  start = time.perf_counter()
  res = sampler.generate(model, batch, **kw)
  seconds = time.perf_counter() - start

  rows = []
  for j, (ids, toks) in enumerate(zip(batch, res.tokens)):
    text = texts[j // n]
    rows.append({
        "prompt": text, "prompt_ids": ids, "sample": j % n,
        "completion_ids": toks,
        "completion": None if tok is None else tok.decode(
            [t for t in toks if t not in stops]),
        "logprobs": res.logprobs[j], "model_logprobs": res.model_logprobs[j],
        "stopped_on_eos": bool(res.done[j]),
    })
  with open(os.path.join(workdir, "samples.jsonl"), "w") as fh:
    for row in rows:
      fh.write(json.dumps(row) + "\n")
  total = int(sum(res.lengths))
  results = {
      "checkpoint": config.init_from or "random",
      "params": cfg.num_params(),
      "num_prompts": len(prompt_ids), "num_samples": len(rows),
      "mean_completion_length": total / len(rows),
      "fraction_stopped_on_eos": float(res.done.mean()),
      "mean_model_logprob_per_token": (
          sum(map(sum, res.model_logprobs)) / max(total, 1)),
      "generated_tokens_per_s": total / seconds,
      "samples_file": os.path.join(workdir, "samples.jsonl"),
  }
  results_lib.write(workdir, "generate", fields=results, config=config,
                    start_time=start_time)
  return results
