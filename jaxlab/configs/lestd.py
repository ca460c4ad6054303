r"""LeSTD miniature (paper P): perplexity vs MHA compression ratio.

    python -m jaxlab.main --config=jaxlab/configs/lestd.py:tiny \
        --workdir=/tmp/lestd

For each seed a byte-level multi-head-attention decoder is trained on the
generated corpus (`jaxlab.train.runner.train_lm`), then its attention
weights are compressed, data-free, at each target ratio of
`compress.ratios` by LeSTD (sparse Tucker core, index-counting ratio),
dense-core Tucker (TensorLLM) and per-matrix truncated SVD, and held-out
perplexity is measured through the compressed model's normal forward
(`TuckerAttention` inside the decoder). Latency and memory of the dense and
compressed models are measured at `compress.latency_ratio`. Spec P.8(b):
4 layers, d=128, 4 heads, ~2k steps. Args: `tiny` (2 layers, d=64, 500
steps, 3 seeds; minutes on 2 shared CPU cores), `smoke` (seconds; plumbing
only, used by the colab test), `steps=N`, `seeds=N` (seeds 0..N-1).

`paper`: Llama-2-13B from `init_from` (`meta-llama/Llama-2-13b-hf`; any
MHA checkpoint `jaxlab.io.pretrained.load` reads), nothing trained: its
attention is compressed data-free by the three methods at each ratio and
perplexity is measured on WikiText-2 as released
(`data.path=Salesforce/wikitext`, `data.subset=wikitext-2-raw-v1`, test
split, column `text`) with the checkpoint's tokenizer, in windows of
`ppl.seq_len` every `ppl.stride` tokens; the LeSTD model at
`compress.export_ratio` is exported as a HF checkpoint and reloaded.
`short`: the same run with its budget cut (`jaxlab.configs._scale.short`:
8 rows of the split).

`smollm2`: the same pretrained path on the shipped SmolLM2-135M-Instruct
(`init_from="smollm2-135m-instruct"`; 30 layers, d_model 576, 9 query
heads sharing 3 KV heads of 64: grouped-query attention, tensorised per KV
group, `lestd.gqa="group"` [inferred]) at ratios 0.2 / 0.4, nothing
trained. The text is a local copy in WikiText-2's layout (`data.subset`
'pydoc-topics', split 'test', column `text`), e.g. Python's own
documentation written by `python -m jaxlab.data.pydoc_text DIR`
(`--config.data.path=DIR`); perplexity in disjoint windows of 256 tokens,
the first `ppl.max_windows`, split into `ppl.groups` disjoint window sets
that pair the methods (the tables' "seeds"). Writes
docs/results/lestd_smollm2.json's run (`results_name`).
"""

import ml_collections

from jaxlab.configs import common
from jaxlab.configs import _scale as scale


# Paper scale (spec P): LeSTD compresses the attention of Llama-2-13B (and
# GPT-J-6B, OPT-30B); the program is the compressed model's evaluation
# forward at its 4k context. (The compressed Tucker factors are smaller than
# the dense weights compiled here: an upper bound.)
PAPER = dict(shape="llama2_13b", topology="v5p:2x2x2", seq_len=4096,
             batch_size=8, program="eval",
             paper="spec P: Llama-2-13B, 4k context")

# The smollm2 preset's budget on 2 shared CPU cores [inferred: sized by
# measuring one window's forward and one layer's HOOI]: the first
# `max_windows` 256-token windows in `groups` disjoint sets; the solver's
# rank grid (R1 / d_model, R2 / d_head; R3 of the 2r+2 = 8 slots) and HOOI
# sweeps cut from the miniature's.
SMOLLM2 = dict(max_windows=128, groups=8,
               rank_fractions=((0.125, 0.25, 0.375, 0.5), (0.75, 1.0)),
               r3_values=(6, 8), hooi_iters=10)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, smollm2=False,
                          smoke=False, steps=0, seeds=0, short=False)
  c = common.base_config()
  c.experiment = "lestd"
  # MHA: LeSTD stacks K and V per query head (num_kv_heads == num_heads)
  c.model.update(dim=128, num_layers=4, num_heads=4, num_kv_heads=4,
                 mlp_dim=384, max_position_embeddings=256)
  c.data.num_docs = 6000
  c.train.update(steps=2000, batch_size=16, seq_len=128)
  c.optim.update(lr=2e-3, warmup_steps=100, weight_decay=0.01)
  c.seeds = (0, 1, 2)
  c.eval_seqs = 32                 # held-out windows of train.seq_len
  c.lestd = ml_collections.ConfigDict({
      # jaxlab.compression.lestd.LeSTDConfig fields (target_ratio is swept)
      "rank_fractions": ((0.125, 0.25, 0.5, 0.75, 1.0), (0.5, 0.75, 1.0)),
      "r3_values": (2, 3, 4),
      "alpha": 0.1,                # spec P.3
      "refit": True,
      "hooi_iters": 50,            # [inferred] 20-50
      "hooi_tol": 1e-6,            # [inferred]
      "index_format": "auto",      # [inferred] spec P.5: coo | bitmap | auto | none
      "index_bits": 32,
      "value_bits": 32,
      # [inferred] GQA extension of spec P.1: "group" (one W_total slice per
      # KV group, mode 3 = its r query heads, K, V, r output heads) or
      # "error" (MHA only)
      "gqa": "group",
  })
  c.compress = ml_collections.ConfigDict({
      "ratios": (0.2, 0.4, 0.6, 0.8),   # spec P.6's axis
      "methods": ("lestd", "tucker", "svd"),
      "latency_ratio": 0.4,
      "latency_batch": 8,
      "latency_repeats": 20,          # 0: no timing
      # the pretrained run (data.source "hf") exports the LeSTD model at
      # this ratio as a HF checkpoint (workdir/export); -1: none
      "export_ratio": 0.4,
  })
  # WikiText-2 perplexity of the pretrained run: windows of seq_len tokens
  # every stride tokens (stride == seq_len: disjoint windows, the SVD-LLM /
  # TensorLLM protocol [inferred: the LeSTD paper does not state it]; a
  # window longer than the text is cut to it)
  # max_windows: the first N windows of the text (0: all); groups > 1:
  # that many disjoint sets of consecutive windows, each set's perplexity
  # one "seed" of the tables (paired comparisons by text chunk);
  # text_name: what the tables call the text.
  c.ppl = ml_collections.ConfigDict({
      "seq_len": 2048, "stride": 2048, "batch_size": 4, "max_windows": 0,
      "groups": 1, "text_name": ""})
  if args.tiny:
    c.model.update(dim=64, num_layers=2, num_heads=4, num_kv_heads=4,
                   mlp_dim=128, max_position_embeddings=128)
    c.data.num_docs = 3000
    c.train.update(steps=500, batch_size=16, seq_len=64)
    c.optim.update(lr=3e-3, warmup_steps=50)
    c.eval_seqs = 32
  if args.smoke:  # seconds-long plumbing check (colab tests); not a result
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=2,
                   mlp_dim=64, max_position_embeddings=64)
    c.data.num_docs = 200
    c.train.update(steps=3, batch_size=4, seq_len=32)
    c.seeds = (0,)
    c.eval_seqs = 2
    c.lestd.update(rank_fractions=((0.25, 0.5), (0.5,)), r3_values=(2,))
    c.compress.update(ratios=(0.5,), methods=("lestd", "svd"),
                      latency_ratio=0.5, latency_batch=1, latency_repeats=0)
  if args.steps:
    c.train.steps = args.steps
  if args.seeds:
    c.seeds = tuple(range(args.seeds))
  if args.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from="meta-llama/Llama-2-13b-hf",
                    path="Salesforce/wikitext", subset="wikitext-2-raw-v1",
                    split="test", eval_split="test")
  if args.smollm2:
    # The shipped real checkpoint, data-free compression, perplexity on a
    # local WikiText-layout text (Python's documentation: jaxlab.data.
    # pydoc_text); sized for 2 shared CPU cores.
    scale.paper_run(c, init_from="smollm2-135m-instruct", path="",
                    subset="pydoc-topics", split="test", eval_split="test")
    c.results_name = "lestd_smollm2"
    c.compress.update(ratios=(0.2, 0.4), export_ratio=-1.0)
    c.ppl.update(seq_len=256, stride=256, batch_size=8,
                 max_windows=SMOLLM2["max_windows"], groups=SMOLLM2["groups"],
                 text_name="Python documentation (pydoc topics)")
    c.lestd.update(rank_fractions=SMOLLM2["rank_fractions"],
                   r3_values=SMOLLM2["r3_values"],
                   hooi_iters=SMOLLM2["hooi_iters"])
  if args.short:
    scale.short(c)
  return c
