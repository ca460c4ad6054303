r"""CL vs SFT for (multimodal) LLM reranking (paper A): weight x direction.

    python -m jaxlab.main --config=jaxlab/configs/rerank.py:probe,tiny \
        --workdir=/tmp/rerank_probe            # the README table, ~minutes
    python -m jaxlab.main --config=jaxlab/configs/rerank.py:probe --workdir=D
    python -m jaxlab.main --config=jaxlab/configs/rerank.py:directions ...
    python -m jaxlab.main --config=jaxlab/configs/rerank.py:negatives ...

Presets (comma-separated, combinable with `tiny`):
  probe       the spec's probing table: W x D in {CL, SFT}^2, W_base (constant)
              and W_base + tau-mask (both with D_SFT).
  directions  W in {CL, SFT} x D in {random (learnable), multi_token}, with
              the reference cells sft/sft, cl/sft, cl/cl (table "directions").
  native      native L_CL and L_SFT (should match the (CL,CL), (SFT,SFT) cells;
              with `directions`: one table).
  all         every cell above.
  negatives   N in {2, 4, 8, 16, 32} for (SFT, SFT) and (CL, CL).
  mm          the probing cells on the multimodal reranker (ViT + decoder):
              the decoder is a tiny HF Qwen2 checkpoint written into the
              workdir (`jaxlab.testing.hf_fixtures`, needs the [test] extra:
              torch + transformers), imported with `jaxlab.io.hf.load` and
              fine-tuned with LoRA (rank 16) on every linear layer; the
              LM head (M_y, M_n) and the embeddings stay frozen.
  vl          `mm` on the Qwen2.5-VL architecture (`reranker.arch =
              "qwen2_5_vl"`): see below.
  smoke       2 cells x 1 seed, a few steps (tests, colab): the embedding
              miniature, or with `mm` the LoRA run on a 1-layer decoder.
  tiny        fewer steps / eval queries (alone: `tiny,smoke`).
A cell is "W/D" (surrogate L_URL) or "native/cl", "native/sft".

`reranker.arch` picks the multimodal backbone: "vit_decoder" (default: a
ViT whose patch tokens fill `<image>` placeholders of the jaxlab decoder)
or "qwen2_5_vl" (preset `vl`, implies `mm`): the reranker is exactly
Qwen2.5-VL (`jaxlab.models.qwen2_vl.Qwen2VL`) on the interleaved prompt --
each image normalised with OpenAI CLIP's mean / std and cut into the
processor's patches at collate time, encoded by the Qwen2.5-VL vision tower
(`reranker.vision`: `VisionConfig` fields, tiny here: depth 1, width 16,
patch 4, 2x2 merge, so a 16-pixel image is 4 placeholders), its merged
features in the placeholders, and the language model at multimodal RoPE
positions computed on the host (`rope_index`, carried in the batch). The
imported fixture becomes its language model (the tower stays random and,
under LoRA, frozen: its `nnx.Linear` names are no LoRA target), and
`jaxlab.io.hf.save(model.vl, rcfg.vl, dir)` exports it as a Qwen2.5-VL
checkpoint.

Training is full fine-tuning of a tiny decoder + ViT from scratch by
default. LoRA on an imported HF decoder: `--config.init_from=DIR
--config.lora.rank=16` (the ViT and the rest stay frozen then).

`paper`: the multimodal reranker on Qwen2.5-VL-7B-Instruct from
`init_from` (`Qwen/Qwen2.5-VL-7B-Instruct`, `reranker.arch="qwen2_5_vl"`),
LoRA rank 16 on every linear layer of its language model
(`lora.targets = _scale.LM_LORA_TARGETS`, the names every decoder
`init_from` loads has, a text LM's and a Qwen2.5-VL / Qwen2-VL language
model's alike; the vision tower, whose weights are `kernel` / `bias`,
gets none and stays frozen), lr 1e-4 (spec A.9), one positive and 15
negatives a group, on M-BEIR as released (`data.path=TIGER-Lab/M-BEIR`, no
subset; train / test; images read from that directory). A Qwen2.5-VL /
Qwen2-VL `init_from` is loaded whole (vision tower included) and each
prompt goes through its chat template and processor, images resized to
`task.image_size` square; a text LM `init_from` reads the text rows only.
`short`: the same run with its budget cut (`jaxlab.configs._scale.short`).

`smollm2`: the paper's claim (SFT's weighting beats CL's) decided on a real
model on 2 CPU cores: the shipped SmolLM2-135M-Instruct
(`init_from="smollm2-135m-instruct"`, its own tokenizer; " yes" / " no"
the label pieces after "Answer:") as the text reranker, LoRA rank 16 on
every linear layer of the decoder (`_scale.LM_LORA_TARGETS`), the M-BEIR
path above on a text retrieval set of real prose in M-BEIR's layout:
`python -m jaxlab.data.pydoc_text --layout=mbeir DIR` (each paragraph of
Python's reference documentation cut after its first sentence; the query
is the sentence, the positive the rest, hard negatives the same topic's
other continuations; test topics unseen in training), then
`--config.data.path=DIR`. Cells sft/sft (the paper's SFT) and cl/cl (its
CL; `--config.cells=sft/sft,cl/sft,cl/cl` adds CL's weight with SFT's
direction, the weighting alone), 3 seeds paired on the same test lists; one positive and 4 negatives (2 hard,
2 random: spec 9's 1 : 1) a group, 8 candidates per test query. Budget
[inferred: sized to the 2-core machine by timing one step]: `SMOLLM2`
(112-token prompts: about one test positive in ten loses its last words).
"""

import ml_collections

from jaxlab.configs import common
from jaxlab.configs import _scale as scale

PROBE_CELLS = ("sft/sft", "sft/cl", "cl/sft", "cl/cl", "constant/sft",
               "constant_tau_mask/sft")
DIRECTION_CELLS = ("sft/random", "cl/random", "sft/multi_token",
                   "cl/multi_token")
NATIVE_CELLS = ("native/cl", "native/sft")
# The cells the direction probes and native losses are paired with (same
# seeds, same run): D_SFT and D_CL under each weight.
DIRECTION_REFS = ("sft/sft", "cl/sft", "cl/cl")


# Paper scale (spec A): GMR-7B = Qwen2.5-VL-7B-Instruct as a pointwise
# reranker, LoRA on all linear layers of the LLM [inferred]; one query with
# its positive and 15 negatives per group, 4 groups a step, 2048 tokens per
# (instruction, query, document) [inferred].
PAPER = dict(shape="qwen2_5_7b", topology="v5p:2x2x4", seq_len=2048,
             batch_size=64, lora_rank=16,
             note=scale.VLM_NOTE.format(size="7B"),
             paper="spec A: GMR-7B (Qwen2.5-VL-7B), pointwise, LoRA")

# The smollm2 preset's budget on 2 CPU cores [inferred].
SMOLLM2 = dict(steps=60, batch_size=2, lr=3e-4, warmup_steps=6,
               max_len=112, num_negatives=4, eval_candidates=8)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  a = common.parse_arg(arg, tiny=False, paper=False,
                       probe=False, directions=False,
                       native=False, all=False, negatives=False, mm=False,
                       vl=False, smoke=False, short=False, smollm2=False)
  if a.vl:
    a.mm = True
  c = common.base_config()
  c.experiment = "rerank"
  c.seeds = (0, 1, 2, 3, 4)  # a seed of the probing miniature costs < 1 min
  cells = []
  if a.probe or a.all:
    cells += PROBE_CELLS
  if a.directions or a.all:
    cells += DIRECTION_CELLS
  if a.native or a.all:
    cells += NATIVE_CELLS
  # Id of the results table (docs/results/rerank*.json hold one per preset).
  c.table = "negatives" if a.negatives else "probe"
  if (a.directions or a.native) and not (a.probe or a.all):
    # Their own table, with the reference cells they are compared with.
    cells = list(DIRECTION_REFS) + cells
    c.table = "directions"
  if a.negatives and not cells:
    cells = ["sft/sft", "cl/cl"]
  if not cells:
    cells = list(PROBE_CELLS)
  c.cells = ",".join(cells)
  # Negatives per query; a non-empty sweep trains every cell at each N.
  c.negatives_sweep = (2, 4, 8, 16, 32) if a.negatives else ()
  # A tiny random HF checkpoint written into WORKDIR/backbone and imported as
  # the reranker's decoder when `fixture` names an architecture (llama,
  # qwen2); "" = none (the decoder is `reranker.decoder`, or `init_from`).
  c.backbone = ml_collections.ConfigDict({
      "fixture": "", "hidden_size": 32, "intermediate_size": 64,
      "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
      "init_std": 0.05, "seed": 0,
  })

  # "embedding": the spec's CPU miniature (MLP over [q; d] embeddings with a
  # frozen, pretrained yes/no head) -- learnable in seconds, used for the
  # probing tables. "multimodal": the ViT + decoder reranker on synthetic
  # universal retrieval (text/image/both), much slower to learn on CPU.
  c.model_kind = "embedding"
  c.embedding = ml_collections.ConfigDict({
      "embed_dim": 16, "hidden": 64, "dim": 32,
      "pos_noise": 0.8, "hard_noise": 1.1,
      "pretrain_steps": 300, "pretrain_lr": 3e-3, "pretrain_batch_size": 128,
  })
  c.task = ml_collections.ConfigDict({
      "tasks": "t2t,t2i,i2t,it2it",
      "num_negatives": 4,          # spec 9: the section-4 analysis uses 4
      "hard_fraction": 0.5,        # spec 9: random : hard = 1 : 1
      "image_size": 16,
      "train_examples": 4096,      # distinct training groups (then repeats)
      "data_seed": 1000,
      "eval_seed": 2000,           # held-out queries: another seed stream
      "eval_queries": 500,
      "eval_candidates": 16,       # first-stage list: 1 positive + 15 negatives
      "word_tokens": True,         # caption words as single tokens
      "doc_style": 1,              # 1: documents rephrase the query; 0: same
  })
  # M-BEIR (the `paper` preset's data): the query instructions.
  # "auto": UniIR's per-task pick from the dataset's
  # instructions/query_instructions.tsv when it is there (the released
  # layout; `jaxlab.data.mbeir`), else "default"; "uniir" (the table is
  # required), "default" (retrieval_jsonl.DEFAULT_INSTRUCTION for every
  # query) or "none" (empty). `instructions_file`: another table (absolute
  # or relative to data.path). [inferred] Spec A does not say which
  # instruction GMR's training used; the released per-task ones are the
  # benchmark's own.
  c.mbeir = ml_collections.ConfigDict({"instructions": "auto",
                                       "instructions_file": ""})
  c.prompt = ml_collections.ConfigDict({
      # [inferred] Qwen3-Reranker style; the tiny model gets no system line.
      "system": "",
      "template": ("{system}<Instruct>: {instruction}\n<Query>: {query}\n"
                   "<Document>: {document}\nAnswer:"),
      "max_len": 104,
  })
  # Sections reach their classes whole: DecoderConfig(**decoder),
  # ViTConfig(**vit), RerankerConfig.from_tokenizer(**labels); vocabulary,
  # context length, image size and the ViT's output width are derived.
  c.reranker = ml_collections.ConfigDict({
      "decoder": {"dim": 64, "num_layers": 2, "num_heads": 4,
                  "num_kv_heads": 2, "mlp_dim": 128, "init_std": 0.02},
      "vit": {"dim": 64, "num_layers": 1, "num_heads": 4, "mlp_dim": 128,
              "patch_size": 4, "init_std": 0.02},
      # "vit_decoder" | "qwen2_5_vl" (with `vision`: VisionConfig fields;
      # out_hidden_size follows the decoder, image size the task).
      "arch": "vit_decoder",
      "vision": {},
      # Label tokens: byte-tokenizer specials by default; with an imported
      # model (init_from + data.tokenizer=sentencepiece) use its pieces,
      # e.g. "▁yes" / "▁no" and an existing special for the image slots.
      "labels": {
          "yes_token": "<yes>", "no_token": "<no>", "image_token": "<image>",
          "label_tokens_pos": ("<yes>", "<true>", "<right>", "<correct>"),
          "label_tokens_neg": ("<no>", "<false>", "<wrong>", "<incorrect>"),
          # multi_token direction: 4 yes-like + 4 no-like
          "num_label_tokens": 8,
      },
  })
  c.loss = ml_collections.ConfigDict({
      "name": "rerank",
      "objective": "url",          # set per cell
      "weight": "sft",
      "direction": "sft",
      "temperature": 1.0,          # InfoNCE temperature (spec: none -> 1)
      "mask_tau": 0.1,             # [inferred] tau-mask threshold (0.1-0.2)
  })
  c.eval = ml_collections.ConfigDict({
      "rank_score": "direction",   # direction | sft | cl
      "batch_size": 128,
      "k": 10,
  })
  c.optim.update(lr=1e-3, warmup_steps=20, weight_decay=0.0, clip_norm=1.0,
                 schedule="cosine")
  c.train.update(steps=400, batch_size=32, seq_len=104, log_every=10,
                 eval_every=0, checkpoint_every=0, keep_checkpoints=1,
                 async_checkpoint=False, tensorboard=False, peak_flops=-1.0)
  if a.tiny:
    # Short prompts: single-token words/instructions, 4 patches per image.
    c.prompt.update(template="{system}{instruction}\nQ:{query}\nD:{document}"
                    "\nA:", max_len=48)
    c.reranker.vit.patch_size = 8
    c.train.seq_len = 48
    c.task.update(train_examples=2048)
    c.train.update(steps=150)
    c.embedding.pretrain_steps = 200
    c.reranker.decoder.update(dim=48, mlp_dim=96, num_heads=4,
                              num_kv_heads=2)
    c.reranker.vit.update(dim=48, mlp_dim=96)
    if not (a.probe or a.directions or a.native or a.all or a.negatives
            or a.mm):
      a.smoke = True
  if a.mm:
    # The multimodal probing table: ViT + an imported (tiny, random) HF
    # Qwen2 decoder, LoRA on every linear layer (spec 9: rank 16). LoRA
    # targets are parameter names, which the ViT's blocks share with the
    # decoder's, so the ViT's linear layers and its projection to the
    # decoder width get adapters too; embeddings, norms, the patch embedding
    # and the LM head (M_y, M_n: the directions) stay frozen.
    c.model_kind = "multimodal"
    c.table = "mm_" + c.table      # mm_probe, mm_directions
    c.seeds = (0, 1, 2)
    c.backbone.fixture = "qwen2"
    c.backbone.init_std = 0.2
    c.lora.update(rank=16, alpha=16.0, targets=(
        "q_dnh", "k_dkh", "v_dkh", "o_nhd", "gate_df", "up_df", "down_fd",
        "proj_in_df", "proj_out_fo"))
    c.task.update(tasks="it2it", doc_style=0, eval_queries=200)
    c.prompt.update(template="{query}|{document}:", max_len=32)
    c.train.update(seq_len=32, batch_size=16, steps=300)
    c.reranker.vit.update(dim=32, mlp_dim=64, patch_size=8)
    c.optim.update(lr=5e-3)
  if a.vl:
    c.table = c.table.replace("mm_", "vl_")
    c.reranker.arch = "qwen2_5_vl"
    c.reranker.vision = {
        "depth": 1, "hidden_size": 16, "intermediate_size": 32,
        "num_heads": 2, "patch_size": 4, "temporal_patch_size": 2,
        "spatial_merge_size": 2, "window_size": 32,
        "fullatt_block_indexes": (0,)}
  if a.smoke:
    # Smoke run (tests, colab): 2 cells, 1 seed, a few steps; the embedding
    # miniature, or with `mm` LoRA on a 1-layer imported decoder.
    c.cells = "sft/sft,cl/cl"
    c.seeds = (0,)
    c.embedding.pretrain_steps = 30
    c.train.update(steps=30)
    c.task.eval_queries = 100
    if a.mm:
      c.backbone.num_layers = 1
      c.train.update(steps=4, batch_size=8)
      c.task.eval_queries = 8
    if a.vl:
      c.train.steps = 3
      c.task.eval_queries = 4
  if a.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from="Qwen/Qwen2.5-VL-7B-Instruct",
                    path="TIGER-Lab/M-BEIR", subset="", split="train",
                    eval_split="test")
    # The reranker is Qwen2.5-VL itself (not the embedding miniature, whose
    # MLP has no decoder weight for LoRA to adapt).
    c.model_kind = "multimodal"
    c.reranker.arch = "qwen2_5_vl"
    c.lora.targets = scale.LM_LORA_TARGETS
    if not (a.probe or a.all or a.directions or a.native or a.negatives):
      c.cells = "sft/sft,cl/cl"   # the paper's CL vs SFT
    if not (a.directions or a.all):
      # Label-token sets only feed the multi_token direction; a checkpoint's
      # vocabulary need not hold "incorrect" as one token.
      c.reranker.labels.num_label_tokens = 0
    c.optim.lr = 1e-4
    c.task.num_negatives = 15     # 1 + 15 documents a group, 4 groups
    # [inferred] Every image resized to one square (a jitted batch's fixed
    # patch grid): 448 = 16 x 28, 256 merged tokens an image.
    c.task.image_size = 448
    c.prompt.max_len = c.train.seq_len
    # Spec A.1's system line; the label tokens are words of the
    # checkpoint's vocabulary, the image slot its <|image_pad|>.
    c.prompt.system = (
        "Judge whether the Document meets the requirements based on the "
        "Query and the Instruct provided. Note that the answer can only be "
        '"yes" or "no".')
    c.reranker.labels.update(
        yes_token="yes", no_token="no", image_token="<|image_pad|>",
        label_tokens_pos=("yes", "true", "right", "correct"),
        label_tokens_neg=("no", "false", "wrong", "incorrect"))
  if a.smollm2:
    b = SMOLLM2
    scale.paper_run(c, init_from="smollm2-135m-instruct", path="",
                    subset="", split="train", eval_split="test")
    c.model_kind = "multimodal"   # the LM itself is the reranker (M-BEIR path)
    c.table = "smollm2"
    c.seeds = (0, 1, 2)
    if not (a.probe or a.all or a.directions or a.native or a.negatives):
      c.cells = "sft/sft,cl/cl"
    c.lora.update(rank=16, alpha=16.0, targets=scale.LM_LORA_TARGETS)
    c.reranker.labels.update(
        yes_token="\u0120yes", no_token="\u0120no",
        label_tokens_pos=("\u0120yes", "\u0120true", "\u0120right",
                          "\u0120correct"),
        label_tokens_neg=("\u0120no", "\u0120false", "\u0120wrong",
                          "\u0120incorrect"))
    if not (a.directions or a.all):
      c.reranker.labels.num_label_tokens = 0
    c.prompt.update(system="", max_len=b["max_len"], template=(
        "{system}Instruction: {instruction}\nQuery: {query}\n"
        "Document: {document}\nDoes the document answer the query? "
        "Answer:"))
    c.task.update(num_negatives=b["num_negatives"],
                  eval_candidates=b["eval_candidates"])
    c.optim.update(lr=b["lr"], warmup_steps=b["warmup_steps"])
    c.train.update(steps=b["steps"], batch_size=b["batch_size"],
                   seq_len=b["max_len"])
  if a.short:
    scale.short(c)
  return c
