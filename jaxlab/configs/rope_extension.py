r"""MrRoPE miniature (paper D): train short on passkey data, test long.

    python -m jaxlab.main --config=jaxlab/configs/rope_extension.py \
        --workdir=workdirs/rope_extension
    python -m jaxlab.main --config=jaxlab/configs/rope_extension.py:tiny \
        --workdir=/tmp/rope_ext

A 2-layer byte-level decoder (dim 64, 2 heads of head_dim 32 as in spec D's
"tiny model", base 1e4) is trained at `train_len` on a copy-style passkey
corpus (`#` + 3 distinct digits hidden at a random depth in filler
sentences; the prompt ends with `#`; see jaxlab/experiments/rope_extension/),
then evaluated training-free at 1x..16x the training length under every
RoPE scaling: passkey exact match over a depth grid and perplexity of
one full-length window.

Args: `tiny` (fewer steps, fewer methods and lengths: the quick look, a few
minutes on 2 CPU cores), `smoke` (seconds; plumbing only, used by the colab
test), `seeds=N`, `steps=N`, `samples=N` (passkey prompts per depth per
length), `train_len=N`, `lr=F`.

`paper`: LLaMA3-8B from `init_from` (`meta-llama/Meta-Llama-3-8B`),
its own tokenizer, extended zero-shot (no training) 8K -> 128K: every
`methods` scaling of the `jaxlab.nn.rope` registry applied to the
checkpoint's config at each `task.eval_lengths` (S = length / L, L the
checkpoint's context or `task.original_len`), scored by perplexity of the
first `length` tokens of `task.eval_docs` long rows of `data.path` (column
`data.text_key`: Proof-pile as released,
`data.path=hoskinson-center/proof-pile`, test split; PG19 the same with
`data.path=emozilla/pg19`) and, when `ruler.path` names RULER's generated
rows (`<task>/validation.jsonl` as RULER's prepare.py writes them, or one
jsonl), RULER's string-match score per task
(`jaxlab.evals.long_context.ruler_row_score`). `short`: the same run with
its budget cut (`jaxlab.configs._scale.short`: rows, documents).

    python -m jaxlab.main --config=rope_extension:paper,short \
        --config.init_from=CHECKPOINT --config.data.path=PG19_COPY \
        --config.ruler.path=RULER_DIR --workdir=/tmp/rope_paper

`smollm2`: the same training-free protocol on the shipped
SmolLM2-135M-Instruct (`init_from="smollm2-135m-instruct"`, trained to 8K,
`rope_theta` 1e5) beyond its context, sized for 2 CPU cores (`SMOLLM2`
below; chunked causal attention): none / PI / NTK / YaRN / MrRoPE-Pro at
`eval_lengths`, perplexity
of long documents of a local PG19-layout copy (e.g. Python's own
documentation, `python -m jaxlab.data.pydoc_text --layout=pg19 DIR`) and
RULER niah_single_1 rows written for the checkpoint's tokenizer
(`python -m jaxlab.experiments.ruler_rows DIR --tokenizer=smollm2-135m-instruct`),
both paired across methods (documents and rows are the tables' "seeds").
Writes docs/results/rope_extension_smollm2.json's run (`results_name`).
Either path may be left out (`data.path`: perplexity, `ruler.path`: RULER);
`smollm2,ruler` is the RULER rows alone, written as
docs/results/rope_extension_smollm2_ruler.json's run:

    python -m jaxlab.experiments.ruler_rows /tmp/ruler12k \
        --tokenizer=smollm2-135m-instruct --max_seq_length 12288
    python -m jaxlab.main --config=rope_extension:smollm2,ruler \
        --config.ruler.path=/tmp/ruler12k --workdir=/tmp/rope_ruler
"""

import ml_collections

from jaxlab.configs import common
from jaxlab.configs import _scale as scale


# Paper scale (spec D): LLaMA3-8B (8K) extended zero-shot to 128K (S = 16)
# with MrRoPE-Pro, perplexity / RULER at 128K: the program is the forward
# pass over 128K-token documents, one per chip.
PAPER = dict(shape="llama3_8b", topology="v5p:2x2x4", seq_len=131072,
             batch_size=16, program="eval",
             paper="spec D: LLaMA3-8B 8K -> 128K, S = 16, MrRoPE-Pro",
             model_overrides={"max_position_embeddings": 131072,
                              "rope_scaling": {
                                  "method": "mrope_pro", "factor": 16.0,
                                  "original_max_position": 8192}})
# The smollm2 preset's budget on 2 shared CPU cores [inferred: sized by
# timing one forward of the model at each length]: lengths past the 8K
# context, documents per length, RULER answer tokens (the 7-digit value
# and the end of the sentence; RULER's own budget is 128).
SMOLLM2 = dict(eval_lengths=(12288,), eval_docs=5, ruler_max_new_tokens=12,
               ruler_pad_multiple=1024,
               methods=("default", "pi", "ntk", "yarn", "mrope_pro"))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, smoke=False, paper=False, seeds=0,
                          steps=0, samples=0, train_len=0, lr=0.0,
                          short=False, smollm2=False, ruler=False)
  c = common.base_config()
  c.experiment = "rope_extension"
  c.seeds = (0, 1, 2, 3, 4)
  c.model.update(dim=64, num_layers=2, num_heads=2, num_kv_heads=2,
                 mlp_dim=256, rope_theta=10000.0,
                 max_position_embeddings=64, vocab_size=320)  # bytes+specials
  c.task = ml_collections.ConfigDict({
      "train_len": 64,
      "eval_factors": (1, 2, 4, 8, 16),
      "digits": 3,
      "answer_weight": 20.0,    # loss weight of an answer digit vs filler
      "train_examples": 200000,  # effectively fresh data every step
      "eval_docs": 4,           # long documents for perplexity per length
      "depths": (0.0, 0.25, 0.5, 0.75, 1.0),
      "samples": 8,             # passkey prompts per (length, depth)
      "data_seed": 1234,
      "eval_batch_size": 8,
      # The real run (data.source = "hf"): the checkpoint's context L
      # (0: its own), the evaluation lengths (empty: L x eval_factors) and
      # the compute dtype of the loaded checkpoint.
      "original_len": 0,
      "eval_lengths": (),
      "dtype": "float32",
      # The loaded checkpoint's attention kernel for the long forwards
      # ("" = its own; "chunked": block by block, forward only, O(T) memory
      # instead of XLA:CPU's T^2 scores; jaxlab.nn.attention).
      "attention_impl": "",
  })
  # RULER rows of the real run ("" = none): a jsonl file or a directory of
  # <task>/<subset>.jsonl; rows per task (0 = all); answer tokens (0 =
  # RULER's tokens_to_generate of the task).
  # pad_multiple: prompts padded to a multiple of it (0 = the sampler's
  # power-of-two buckets; a 12,285-token row then costs a 16,384 prefill).
  c.ruler = ml_collections.ConfigDict({
      "path": "", "subset": "validation", "max_rows": 0,
      "max_new_tokens": 0, "pad_multiple": 0})
  c.methods = ("default", "pi", "ntk", "dynamic_ntk", "yarn", "yarn_rotation",
               "llama3", "mrope_uni", "mrope_pro")
  c.train.update(steps=1000, batch_size=32, seq_len=64, log_every=100,
                 eval_every=250, eval_batch_size=64, eval_batches=2,
                 checkpoint_every=1000, keep_checkpoints=1, tensorboard=False,
                 peak_flops=-1.0)
  c.optim.update(lr=3e-3, warmup_steps=100, weight_decay=0.01)
  if args.tiny:
    c.methods = ("default", "pi", "ntk", "yarn", "mrope_uni", "mrope_pro")
    c.task.update(eval_factors=(1, 4, 8), samples=4, eval_docs=2)
    c.seeds = (0,)
    c.train.update(steps=800, eval_every=200)
  if args.smoke:  # seconds-long plumbing check (colab tests); not a result
    c.seeds = (0,)
    c.methods = ("default", "yarn", "mrope_pro")
    c.task.update(train_len=64, eval_factors=(1, 4), train_examples=256,
                  samples=1, depths=(0.5,), eval_docs=1, eval_batch_size=2)
    c.train.update(steps=10, batch_size=8, seq_len=64, log_every=5,
                   eval_every=0, eval_batch_size=8, eval_batches=1,
                   checkpoint_every=0)
  if args.seeds:
    c.seeds = tuple(range(args.seeds))
  if args.steps:
    c.train.steps = args.steps
  if args.samples:
    c.task.samples = args.samples
  if args.train_len:
    c.task.train_len = c.train.seq_len = args.train_len
  if args.lr:
    c.optim.lr = args.lr
  if args.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from="meta-llama/Meta-Llama-3-8B",
                    path="hoskinson-center/proof-pile", subset="",
                    split="test", eval_split="test", text_key="text")
    c.methods = ("default", "pi", "ntk", "yarn", "mrope_uni", "mrope_pro")
    c.task.update(eval_lengths=(4096, 8192, 16384, 32768, 65536, 131072),
                  eval_docs=10, eval_batch_size=1, dtype="bfloat16")
  if args.smollm2:
    scale.paper_run(c, init_from="smollm2-135m-instruct", path="",
                    subset="", split="test", eval_split="test",
                    text_key="text")
    c.results_name = "rope_extension_smollm2"
    c.methods = SMOLLM2["methods"]
    c.task.update(eval_lengths=SMOLLM2["eval_lengths"],
                  eval_docs=SMOLLM2["eval_docs"], eval_batch_size=1,
                  dtype="float32", attention_impl="chunked")
    c.ruler.max_new_tokens = SMOLLM2["ruler_max_new_tokens"]
    c.ruler.pad_multiple = SMOLLM2["ruler_pad_multiple"]
    if args.ruler:  # RULER rows only (no data.path): their own results file
      c.results_name = "rope_extension_smollm2_ruler"
  if args.short:
    scale.short(c)
  return c
