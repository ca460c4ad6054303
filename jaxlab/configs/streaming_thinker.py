r"""StreamingThinker miniature (paper K): think while reading.

    python -m jaxlab.main --config=jaxlab/configs/streaming_thinker.py:tiny \
        --workdir=/tmp/stream

Streaming running-sum stories (`jaxlab.data.synthetic.running_sum`): the
question first, then one sentence per segment ("has 3", "gets 4", ...); the
reasoning writes the running total after each sentence and a final segment
of depth `task.depth` (D2: a recomputation of the sum, then the answer).
Per seed, one small decoder per method is trained from scratch with the loss
registry's `streaming_lm` (target tokens only) through the step runner:

  streaming:   streaming mask + SPE, decoded with dual caches (READ/WRITE);
  batch:       causal mask, contiguous positions, decoded after the input;
  interleaved: source and reasoning segments alternating in one causal
               sequence, decoded with one cache;

then every method decodes the same held-out stories greedily, and the
arrival clock (`clock.tokens_per_tick` input tokens per tick, one decode
step per tick, READs free by default) gives TTFT and Delay.

Args: `tiny` (3 seeds, 2-layer d=64 models, 500 steps, 48 held-out stories:
what 2 shared CPU cores allow), `smoke` (seconds; plumbing only, used by the
colab test), `seeds=N`, `steps=N`, `stories=N`, `depth=D1|D2|D3`.

`paper`: Qwen3-4B from `init_from` (`Qwen/Qwen3-4B`) evaluated on
StreamingCoT as released (`data.path=JunlongTong/StreamingCoT`, subset
`Eval`, split `gsm_symbolic_p1_1k_eval`): accuracy, TTFT and Delay per
method, decoded by the checkpoint as given (the paper's streaming SFT on
`Train`, lr 1e-5 with 300 warm-up steps, is not run yet). `short`: the same
run with its budget cut (`jaxlab.configs._scale.short`: 8 rows).
"""

import ml_collections

from jaxlab.configs import common
from jaxlab.configs import _scale as scale
from jaxlab.data.synthetic import running_sum

METHODS = ("streaming", "batch", "interleaved")


# Paper scale (spec K): Qwen3-4B full fine-tune in streaming mode,
# per-device batch 2 x grad-accum 2 x 2 GPUs, gradient checkpointing;
# source + target within 4096 tokens [inferred]. The global batch of 8 is one
# sequence per chip on v5e:2x4, so no gradient accumulation is needed.
PAPER = dict(shape="qwen3_4b", topology="v5e:2x4", seq_len=4096,
             batch_size=8,
             paper="spec K: Qwen3-4B streaming SFT, batch 2x2x2")

def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False,
                          smoke=False, seeds=0, steps=0,
                          stories=0, depth="", short=False)
  c = common.base_config()
  c.experiment = "streaming_thinker"
  c.seeds = (0, 1, 2)
  c.methods = METHODS
  c.model.update(vocab_size=running_sum.VOCAB_SIZE, dim=128, num_layers=4,
                 num_heads=4, num_kv_heads=4, mlp_dim=384,
                 max_position_embeddings=256, init_std=0.02)
  c.task = ml_collections.ConfigDict({
      "depth": "D2",
      "min_sentences": 3,
      "max_sentences": 6,
      "max_value": 5,
      "max_total": 9,
      "train_examples": 20000,
      "eval_stories": 128,
      "data_seed": 1234,
  })
  c.loss = ml_collections.ConfigDict({"name": "streaming_lm"})
  c.train.update(steps=2000, batch_size=32, log_every=100)
  c.optim.update(lr=3e-3, warmup_steps=50, weight_decay=0.0,
                 end_lr_frac=0.0)
  c.decode = ml_collections.ConfigDict({
      "max_new_tokens": 48,
      "read_chunk": 8,
      "temperature": 0.0,
  })
  # Input tokens per tick (one decode step = one tick): 0.25 = a decoder
  # four times faster than the input stream (speech-like), 1.0 = as fast.
  c.clock = ml_collections.ConfigDict({
      "tokens_per_tick": (0.25, 1.0),
      "read_ticks_per_token": 0.0,   # [inferred]: prefill off the clock
  })
  if args.tiny:  # what 2 shared CPU cores allow
    c.model.update(dim=64, num_layers=2, mlp_dim=192)
    c.task.update(train_examples=8000, eval_stories=48)
    c.train.update(steps=500, batch_size=32, log_every=50)
  if args.smoke:  # seconds-long plumbing check (colab tests); not a result
    c.seeds = (0,)
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=2,
                   mlp_dim=64)
    c.task.update(train_examples=64, eval_stories=2, max_sentences=3)
    c.train.update(steps=2, batch_size=8, log_every=1)
    c.decode.max_new_tokens = 12
  if args.seeds:
    c.seeds = tuple(range(args.seeds))
  if args.steps:
    c.train.steps = args.steps
  if args.stories:
    c.task.eval_stories = args.stories
  if args.depth:
    c.task.depth = args.depth
  if args.paper:
    scale.preset(c, PAPER)
    # The dataset card's configs (README.md e30d7bc): `Train` (split train)
    # and `Eval` (metamathqa_1k_eval, gsm_symbolic_p1_1k_eval,
    # gsm_symbolic_p2_0_5k_eval). The run evaluates `init_from` on one Eval
    # split (`experiments.streaming_thinker.run_released`).
    scale.paper_run(c, init_from="Qwen/Qwen3-4B",
                    path="JunlongTong/StreamingCoT", subset="Eval",
                    split="gsm_symbolic_p1_1k_eval", eval_split="")
    c.optim.update(lr=1e-5, warmup_steps=300, schedule="linear")
    # The authors' evaluate_streaming.py default; tokens_per_tick stays a
    # token clock (the paper's 150 words/min is not modelled here).
    c.decode.update(max_new_tokens=2048, read_chunk=32)
  if args.short:
    scale.short(c)
  return c
