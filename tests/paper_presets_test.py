"""Paper-scale presets: the released models' shapes, and every `:paper`
config a valid compile target (`jaxlab.configs._scale`)."""

import importlib

from absl.testing import absltest
from absl.testing import parameterized
import jax
import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.experiments.bench import tpu_presets
from jaxlab.models import decoder as decoder_lib
from jaxlab.models import qwen2_vl_prefix
from jaxlab.models import registry

# Parameter counts of the released checkpoints (safetensors totals on their
# Hugging Face model cards / `sum(p.numel())` in transformers): a wrong
# width, depth, head count, vocabulary or tying changes them.
RELEASED_PARAMS = {
    "llama3_2_1b": 1_235_814_400,
    "llama3_2_3b": 3_212_749_824,
    "llama3_8b": 8_030_261_248,
    "llama2_7b": 6_738_415_616,
    "llama2_13b": 13_015_864_320,
    "qwen2_5_0_5b": 494_032_768,
    "qwen2_5_3b": 3_085_938_688,
    "qwen2_5_7b": 7_615_616_512,
    "qwen2_5_14b": 14_770_033_664,
    "qwen3_4b": 4_022_468_096,
    "qwen3_8b": 8_190_735_360,
    "llada_8b": 8_015_581_184,
    "mistral_7b": 7_241_732_096,
}


class ShapesTest(parameterized.TestCase):

  def test_every_shape_has_its_released_count(self):
    self.assertEqual(set(scale.SHAPES), set(RELEASED_PARAMS))
    for name, fields in scale.SHAPES.items():
      self.assertEqual(decoder_lib.DecoderConfig(**fields).num_params(),
                       RELEASED_PARAMS[name], name)

  def test_unknown_shape_and_program_are_named(self):
    from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(ValueError, "unknown shape 'gpt5'"):
      scale.apply(common.base_config(), shape="gpt5", topology="v5e:2x2",
                  seq_len=8, batch_size=1, paper="-")
    with self.assertRaisesRegex(ValueError, "program='infer'"):
      scale.apply(common.base_config(), shape="llama3_8b", program="infer",
                  topology="v5e:2x2", seq_len=8, batch_size=1, paper="-")


class PaperPresetsTest(parameterized.TestCase):

  def test_presets_are_found(self):
    names = tpu_presets.paper_configs()
    for name in ("rope_extension", "dpad", "mathfimer", "pmc", "rerank",
                 "controller", "stabletoken", "vulcan"):
      self.assertIn(name, names)
    self.assertEqual(tpu_presets.topology_flag("vulcan"),
                     ["--topology=v5e:2x2"])
    self.assertEqual(tpu_presets.topology_flag("controller"), [])

  def test_each_preset_is_a_compile_target(self):
    for name in tpu_presets.paper_configs():
      mod = importlib.import_module(f"jaxlab.configs.{name}")
      if not isinstance(getattr(mod, "PAPER", None), dict):
        continue  # its own shape (controller, StableToken, Vulcan): tested
        # by its compile test (tests/experiments/*_compile_test.py)
      c = mod.get_config("paper")
      with self.subTest(name):
        self.assertIn(c.scale.shape, scale.SHAPES)
        self.assertIn(c.scale.program, scale.PROGRAMS)
        self.assertIn(":", c.scale.topology)
        self.assertTrue(c.scale.paper)
        # The model section is exactly the released shape (+ overrides) in
        # bf16 over fp32 master weights, scanned, remat'd (a vision preset:
        # its language model).
        if "vision" in mod.PAPER:
          dcfg = qwen2_vl_prefix.config_from_dict(c.model)[0].text
        else:
          dcfg = registry.decoder_config(c.model)
        for k, v in scale.SHAPES[c.scale.shape].items():
          if k not in mod.PAPER.get("model_overrides", {}):
            self.assertEqual(getattr(dcfg, k), v, (name, k))
        self.assertEqual((dcfg.dtype, dcfg.param_dtype, dcfg.scan_layers),
                         ("bfloat16", "float32", True))
        self.assertEqual(c.train.batch_size % c.optim.grad_accum, 0)
        self.assertEqual(c.mesh.fsdp, -1)


# Qwen2.5-VL-3B / -7B `vision_config` (config.json of the released
# checkpoints); out_hidden_size is the language model's width.
QWEN25_VL_TOWER = dict(depth=32, hidden_size=1280, intermediate_size=3420,
                       num_heads=16, patch_size=14, spatial_merge_size=2,
                       temporal_patch_size=2, window_size=112,
                       fullatt_block_indexes=(7, 15, 23, 31),
                       tokens_per_second=2, hidden_act="silu", in_channels=3)
# name -> (kind, (H, W), frames, loss, merged vision tokens by hand:
# (H / 28) * (W / 28) * ceil(frames / 2)).
VISION_PRESETS = {
    "chart_to_code": ("image", (1008, 1008), 1, "prefix_lm_nll", 36 * 36),
    "trust_grpo": ("image", (448, 448), 1, "prefix_lm_nll", 16 * 16),
    "video_reason": ("video", (448, 448), 32, "video_lm", 16 * 16 * 16),
    "vudg": ("video", (336, 420), 16, "video_lm", 12 * 15 * 8),
}


class VisionPresetsTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(k, k) for k in VISION_PRESETS])
  def test_vision_preset_is_the_whole_qwen2_5_vl(self, name):
    kind, size, frames, loss, tokens = VISION_PRESETS[name]
    c = importlib.import_module(f"jaxlab.configs.{name}").get_config("paper")
    self.assertEqual(c.model.name, "qwen2_5_vl_prefix")
    for k, v in QWEN25_VL_TOWER.items():
      self.assertEqual(c.model.vision[k], v, (name, k))
    self.assertEqual(c.model.vision.out_hidden_size, 3584)  # the 7B's LM
    self.assertEqual((c.model.vision.dtype, c.model.vision.param_dtype),
                     ("bfloat16", "float32"))
    self.assertEqual((c.model.prefix.kind, tuple(c.model.prefix.image_size),
                      c.model.prefix.num_frames), (kind, size, frames))
    self.assertEqual(c.scale.loss, loss)
    self.assertEqual(c.scale.vision.vision_tokens, tokens)
    self.assertEqual(c.scale.vision.positions,
                     tokens + 2 + c.train.seq_len)
    self.assertIn("vision tower included", c.scale.note)
    # The model builds: the released vocabulary keeps Qwen's vision ids.
    vl_cfg, prefix = qwen2_vl_prefix.config_from_dict(c.model)
    self.assertEqual(vl_cfg.text.vocab_size, 152064)
    self.assertEqual((vl_cfg.image_token_id, vl_cfg.video_token_id,
                      vl_cfg.vision_start_token_id,
                      prefix.vision_end_token_id),
                     (151655, 151656, 151652, 151653))
    self.assertEqual(prefix.task_vocab_size, 0)

  def test_tower_params_are_the_released_count(self):
    # Qwen2.5-VL-7B's `visual.*` tensors, by hand: patch embedding 1176 x
    # 1280; 32 blocks of 2 RMSNorms, qkv (1280 x 3840 + 3840), proj (1280^2
    # + 1280), SwiGLU (3 x 1280 x 3420 + 2 x 3420 + 1280); the merger's
    # ln_q, 5120^2 + 5120 and 5120 x 3584 + 3584.
    block = (2 * 1280 + 1280 * 3840 + 3840 + 1280 * 1280 + 1280
             + 3 * 1280 * 3420 + 2 * 3420 + 1280)
    want = (1176 * 1280 + 32 * block + 1280 + 5120 * 5120 + 5120
            + 5120 * 3584 + 3584)
    c = importlib.import_module("jaxlab.configs.chart_to_code").get_config(
        "paper")
    self.assertEqual(c.scale.vision.params, want)
    # The LM alone is the released Qwen2.5-7B count (RELEASED_PARAMS).
    vl_cfg, _ = qwen2_vl_prefix.config_from_dict(c.model)
    self.assertEqual(vl_cfg.text.num_params(), RELEASED_PARAMS["qwen2_5_7b"])

  def test_rerank_stays_the_language_model(self):
    c = importlib.import_module("jaxlab.configs.rerank").get_config("paper")
    self.assertEqual(c.model.name, "decoder")
    self.assertNotIn("vision", c.scale)
    self.assertIn("not in the compiled program", c.scale.note)

  def test_bad_vision_arguments_are_named(self):
    from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
    kw = dict(shape="qwen2_5_7b", topology="v5e:2x2", seq_len=8,
              batch_size=1, paper="-")
    for vision, msg in (
        (dict(kind="audio", image_size=448), "vision kind='audio'"),
        (dict(kind="image"), "needs image_size"),
        (dict(kind="video", image_size=448), "needs num_frames"),
        (dict(kind="image", image_size=450), "multiples of"),
        (dict(kind="image", image_size=448, shape="clip"),
         "unknown vision shape 'clip'"),
        (dict(kind="image", image_size=448, fps=2), "unknown keys")):
      with self.assertRaisesRegex(ValueError, msg):
        scale.apply(common.base_config(), vision=vision, **kw)


# name -> (init_from, data.path, data.subset) of `get_config("paper")`: the
# paper's released checkpoint and dataset as Hub ids (each config's
# docstring says the same).
PAPER_RUNS = {
    "calibration": ("Qwen/Qwen2.5-7B-Instruct", "openai/gsm8k", "main"),
    "chart_to_code": ("Qwen/Qwen2.5-VL-7B-Instruct", "ChartMimic/ChartMimic",
                      ""),
    "controller": ("", "", ""),
    "dpad": ("GSAI-ML/LLaDA-8B-Instruct", "openai/gsm8k", "main"),
    "frequency_entropy": ("meta-llama/Meta-Llama-3-8B", "Salesforce/wikitext",
                          "wikitext-103-raw-v1"),
    "lestd": ("meta-llama/Llama-2-13b-hf", "Salesforce/wikitext",
              "wikitext-2-raw-v1"),
    "mathfimer": ("Qwen/Qwen2.5-Math-7B", "openai/gsm8k", "main"),
    "pmc": ("meta-llama/Llama-3.2-3B-Instruct", "locuslab/TOFU", "forget10"),
    "rerank": ("Qwen/Qwen2.5-VL-7B-Instruct", "TIGER-Lab/M-BEIR", ""),
    "rope_extension": ("meta-llama/Meta-Llama-3-8B",
                       "hoskinson-center/proof-pile", ""),
    "sipit": ("meta-llama/Llama-3.1-8B", "wikimedia/wikipedia",
              "20231101.en"),
    "speckv": ("meta-llama/Llama-3.1-8B-Instruct", "THUDM/LongBench",
               "qasper"),
    "stabletoken": ("openai/whisper-large-v3", "openslr/librispeech_asr",
                    "clean"),
    "streaming_thinker": ("Qwen/Qwen3-4B", "JunlongTong/StreamingCoT",
                          "Eval"),
    "trust_grpo": ("Qwen/Qwen2.5-VL-7B-Instruct",
                   "bunny127/SophiaVL-R1-130k", ""),
    "uncertainty": ("mistralai/Mistral-7B-v0.1", "mandarjoshi/trivia_qa",
                    "rc.nocontext"),
    "video_reason": ("Qwen/Qwen2.5-VL-7B-Instruct", "lyx97/reasoning_videos",
                     ""),
    "vudg": ("Qwen/Qwen2.5-VL-7B-Instruct", "QLGalaxy/VUDG", ""),
    "vulcan": ("facebook/deit-base-patch16-224", "imagenet2012", ""),
}
# Papers whose preset reads the released data through TFDS (`data.path` is
# the TFDS name): ImageNet-1k as `tfds build imagenet2012` prepares it (the
# Hub's ILSVRC/imagenet-1k is a loading script over tar files).
TFDS_RUNS = ("vulcan",)
# The paper releases neither a checkpoint nor data: its model trains from
# scratch on the generated algorithmic tasks (the config's docstring).
FROM_SCRATCH = ("controller",)
# Checkpoint -> the `SHAPES` entry the compile builds in its place (the
# language model of a Qwen2.5-VL checkpoint).
CHECKPOINT_SHAPES = {
    "Qwen/Qwen2.5-7B-Instruct": "qwen2_5_7b",
    "Qwen/Qwen2.5-VL-7B-Instruct": "qwen2_5_7b",
    "Qwen/Qwen2.5-Math-7B": "qwen2_5_7b",
    "GSAI-ML/LLaDA-8B-Instruct": "llada_8b",
    "meta-llama/Meta-Llama-3-8B": "llama3_8b",
    "meta-llama/Llama-3.1-8B": "llama3_8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3_8b",
    "meta-llama/Llama-2-13b-hf": "llama2_13b",
    "meta-llama/Llama-3.2-3B-Instruct": "llama3_2_3b",
    "Qwen/Qwen3-4B": "qwen3_4b",
    "mistralai/Mistral-7B-v0.1": "mistral_7b",
    # StableToken's tokenizer on Whisper's encoder ("whisper_tokenizer").
    "openai/whisper-large-v3": "whisper_large_v3",
}


def _flat(d, prefix=""):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _module(name):
  return importlib.import_module(f"jaxlab.configs.{name}")


class PaperRunTest(parameterized.TestCase):
  """`NAME:paper` is the run: the paper's checkpoint and released data."""

  def test_every_paper_config_is_listed(self):
    from jaxlab import configs  # pylint: disable=g-import-not-at-top
    papers = {n for n in configs.packaged()
              if n not in ("lm_tiny", "generate", "finetune", "rl")}
    self.assertEqual(papers, set(PAPER_RUNS))

  @parameterized.named_parameters(*[(n, n) for n in sorted(PAPER_RUNS)])
  def test_paper_preset_names_checkpoint_and_data(self, name):
    mod = _module(name)
    c = mod.get_config("paper")
    init_from, path, subset = PAPER_RUNS[name]
    self.assertEqual((c.init_from, c.data.path, c.data.subset),
                     (init_from, path, subset))
    self.assertIn("subset", c.data)
    self.assertEqual(c.data.max_rows, 0)   # every row
    if name in FROM_SCRATCH:
      self.assertEqual(c.data.source, "synthetic")
    else:
      self.assertTrue(c.init_from and c.data.path)
      self.assertEqual((c.data.source, c.data.tokenizer),
                       ("tfds" if name in TFDS_RUNS else "hf", "auto"))
      self.assertTrue(c.data.split)
      # The docstring documents the preset line (checkpoint, dataset,
      # subset); whitespace and line breaks aside.
      doc = "".join(mod.__doc__.split())
      for value in (init_from, path, subset):
        self.assertIn(value, doc, (name, value))
    # The compiled shape is the checkpoint's.
    if "scale" in c and c.init_from:
      self.assertEqual(c.scale.shape, CHECKPOINT_SHAPES[c.init_from])

  @parameterized.named_parameters(*[(n, n) for n in sorted(PAPER_RUNS)])
  def test_short_cuts_the_budget_and_nothing_else(self, name):
    mod = _module(name)
    paper = _flat(mod.get_config("paper").to_dict())
    short = _flat(mod.get_config("paper,short").to_dict())
    self.assertEqual(set(paper), set(short))
    changed = {k for k in paper if paper[k] != short[k]}
    self.assertContainsSubset({"train.steps", "data.max_rows"}, changed)
    not_budget = sorted(k for k in changed
                        if not scale.is_budget_key(k.split(".")[-1]))
    self.assertEqual(not_budget, [], name)
    for k in changed:   # every cut is a cut, never a raise
      if isinstance(paper[k], int):
        self.assertLess(short[k], paper[k] if paper[k] > 0 else
                        float("inf"), k)
    if "seeds" in short:
      self.assertEqual(short["seeds"], (0,))
    self.assertEqual((short["init_from"], short["data.path"]),
                     (paper["init_from"], paper["data.path"]))

  def test_frequency_entropy_nope_layers(self):
    # The paper run reads its NoPE layers from the checkpoint's config
    # (tests/experiments/frequency_entropy_downstream_test.py); the
    # compiled shape (Llama-3-8B) has none.
    c = _module("frequency_entropy").get_config("paper")
    self.assertEqual(registry.decoder_config(c.model).nope_layers, ())

  def test_vision_inputs_are_the_towers_size(self):
    c = _module("chart_to_code").get_config("paper")
    self.assertEqual(c.charts.image_size, 1008)
    self.assertEqual(tuple(c.model.prefix.image_size), (1008, 1008))
    c = _module("video_reason").get_config("paper")
    self.assertEqual(c.task.frame_size, 448)
    self.assertEqual(tuple(c.model.prefix.image_size), (448, 448))
    c = _module("vudg").get_config("paper")
    self.assertEqual(tuple(c.vudg.size), (336, 420))
    self.assertEqual(tuple(c.model.prefix.image_size), (336, 420))

  def test_rerank_paper_adapts_the_vl_decoder(self):
    c = _module("rerank").get_config("paper")
    self.assertEqual((c.model_kind, c.reranker.arch),
                     ("multimodal", "qwen2_5_vl"))
    self.assertEqual(tuple(c.lora.targets), scale.LM_LORA_TARGETS)
    self.assertEqual((c.lora.rank, c.optim.lr), (16, 1e-4))

  def test_vulcan_paper_model_is_deit_base(self):
    from jaxlab.models import vit_classifier  # pylint: disable=g-import-not-at-top
    c = _module("vulcan").get_config("paper")
    cfg = vit_classifier.config_from_dict(c.model)
    # DeiT-B/16 (= ViT-B/16) ImageNet classifier: 86,567,656 parameters
    # (transformers' DeiTForImageClassification /
    # ViTForImageClassification of the released checkpoints).
    self.assertEqual(cfg.num_params(), 86_567_656)
    self.assertEqual((cfg.image_size, cfg.patch_size, cfg.channels),
                     (224, 16, 3))
    self.assertLen(c.target_classes, 25)

  def test_stabletoken_paper_model_is_whisper_large_v3(self):
    from jaxlab.models import speech_tokenizer  # pylint: disable=g-import-not-at-top
    c = _module("stabletoken").get_config("paper")
    t = c.tokenizer
    # Whisper-large-v3 config.json: d_model, encoder_layers,
    # encoder_attention_heads, encoder_ffn_dim, num_mel_bins.
    self.assertEqual((t.dim, t.lower_layers + t.upper_layers, t.num_heads,
                      t.mlp_dim, c.features.n_mels),
                     (1280, 32, 20, 5120, 128))
    self.assertEqual(t.lower_layers, 16)           # Voting-LFQ at block 16
    self.assertEqual(2 ** t.bits, 8192)            # the 8192-token codebook
    self.assertEqual(100 / (t.conv_stride * t.pool), 25.0)   # 25 Hz tokens
    fields = {k: v for k, v in t.to_dict().items() if k != "name"}
    speech_tokenizer.SpeechTokenizerConfig(n_mels=c.features.n_mels,
                                           **fields)

  def test_controller_paper_sizes(self):
    c = _module("controller").get_config("paper")
    ctl = c.model.controller
    self.assertEqual((ctl.num_registers, ctl.register_dim, ctl.state_dim),
                     (8, 64, 128))
    # FLOP overhead (1/2p)(d_s/D)^2 at p = 2: the spec's 5-7 %.
    overhead = (ctl.state_dim / c.model.dim) ** 2 / (2 * ctl.every_p)
    self.assertBetween(overhead, 0.05, 0.07)
    self.assertEqual(tuple(c.test_lengths), (80, 160, 320))
    self.assertLessEqual(2 * max(c.test_lengths) + 3,
                         c.model.max_position_embeddings)


class ShortRuleTest(absltest.TestCase):

  def _config(self):
    return ml_collections.ConfigDict({
        "seeds": (3, 4, 5), "flag": True,
        "train": {"steps": 1000, "warmup_steps": 100, "eval_batches": 0},
        "sft": {"steps": 1, "cot_steps": 4, "anneal_steps": -1},
        "rl": {"stage1_steps": 60},
        "eval": {"num_samples": 50, "num_bootstrap": 1000,
                 "eval_queries": 500, "max_new_tokens": 200},
        "data": {"max_rows": 0, "path": "x"},
        "lottery": {"rounds": 1500}})

  def test_rule(self):
    c = scale.short(self._config(), {"lottery.rounds": 10})
    self.assertEqual(_flat(c.to_dict()), {
        "seeds": (0,), "flag": True,
        "train.steps": 2, "train.warmup_steps": 100, "train.eval_batches": 1,
        "sft.steps": 1, "sft.cot_steps": 4, "sft.anneal_steps": -1,
        "rl.stage1_steps": 2,
        "eval.num_samples": 2, "eval.num_bootstrap": 10,
        "eval.eval_queries": 8, "eval.max_new_tokens": 200,
        "data.max_rows": 8, "data.path": "x", "lottery.rounds": 10})

  def test_specific_cut_must_be_a_budget_field(self):
    with self.assertRaisesRegex(ValueError, "'eval.max_new_tokens' is not a "
                                "budget field"):
      scale.short(self._config(), {"eval.max_new_tokens": 8})
    with self.assertRaisesRegex(ValueError, "no field 'eval.steps'"):
      scale.short(self._config(), {"eval.steps": 8})


# Minimal config.json of each architecture `jaxlab.io.hf` loads (the
# transformers 4 dialect, which it reads too).
_BASE = dict(vocab_size=64, hidden_size=32, intermediate_size=48,
             num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, rope_theta=1e4,
             max_position_embeddings=64, rms_norm_eps=1e-6)
HF_CONFIGS = {
    "llama": dict(_BASE, architectures=["LlamaForCausalLM"],
                  model_type="llama"),
    "qwen2": dict(_BASE, architectures=["Qwen2ForCausalLM"],
                  model_type="qwen2", tie_word_embeddings=True),
    "qwen3": dict(_BASE, architectures=["Qwen3ForCausalLM"],
                  model_type="qwen3", head_dim=16),
    "mistral": dict(_BASE, architectures=["MistralForCausalLM"],
                    model_type="mistral", sliding_window=16),
    "dream": dict(_BASE, architectures=["DreamModel"], model_type="Dream"),
    "gemma3": dict(_BASE, architectures=["Gemma3ForCausalLM"],
                   model_type="gemma3_text", num_hidden_layers=4,
                   head_dim=16, sliding_window=16,
                   sliding_window_pattern=2, query_pre_attn_scalar=16,
                   rope_local_base_freq=1e4),
    "llada": {"architectures": ["LLaDAModelLM"], "model_type": "llada",
              "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "n_layers": 2,
              "mlp_hidden_size": 48, "vocab_size": 64,
              "embedding_size": 64, "rope_theta": 1e4,
              "rms_norm_eps": 1e-6, "max_sequence_length": 64,
              "weight_tying": False, "block_type": "llama",
              "layer_norm_type": "rms", "include_bias": False,
              "activation_type": "silu", "mask_token_id": 63,
              "eos_token_id": 2},
}


class LoraTargetsTest(parameterized.TestCase):
  """`LM_LORA_TARGETS` adapt every linear layer of every decoder `init_from`
  loads: each HF `*_proj` weight of the checkpoint (the Linear layers PEFT
  targets, the LM head aside) gets one adapter, nothing else does."""

  @parameterized.product(arch=sorted(HF_CONFIGS), scan=(False, True))
  def test_every_projection_is_adapted(self, arch, scan):
    from flax import nnx  # pylint: disable=g-import-not-at-top
    from jaxlab.io import hf  # pylint: disable=g-import-not-at-top
    from jaxlab.train import lora  # pylint: disable=g-import-not-at-top
    cfg = hf.config_from_hf(HF_CONFIGS[arch]).replace(scan_layers=scan)
    projections = sorted(
        path[-1] for path, row in hf.tensor_table(cfg).items()
        if row[0].endswith("_proj.weight"))
    self.assertLen(projections, 7 * cfg.num_layers)
    model = decoder_lib.Decoder(cfg, rngs=nnx.Rngs(0))
    added = lora.add_lora(model, rank=2, alpha=4.0,
                          targets=scale.LM_LORA_TARGETS, rngs=nnx.Rngs(1))
    if not scan:
      self.assertLen(added, 7 * cfg.num_layers)
    # Scanned: one stacked weight per name and scanned block, each holding
    # num_layers / blocks layers.
    self.assertEqual(sorted(added * (7 * cfg.num_layers // len(added))),
                     projections)

  def test_vision_tower_is_not_adapted(self):
    from flax import nnx  # pylint: disable=g-import-not-at-top
    from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
    from jaxlab.train import lora  # pylint: disable=g-import-not-at-top
    dec = common.decoder_config()
    dec.update(vocab_size=64, dim=32, num_layers=2, num_heads=4,
               num_kv_heads=2, mlp_dim=48)
    mcfg = common.qwen_vl_prefix_model(dec, kind="image", image_size=16)
    model = registry.get_spec(mcfg).factory()
    added = lora.add_lora(model, rank=2, alpha=4.0,
                          targets=scale.LM_LORA_TARGETS, rngs=nnx.Rngs(1))
    self.assertEqual(sorted(added), sorted(scale.LM_LORA_TARGETS * 2))
    adapted = {jax.tree_util.keystr(p) for p, _ in
               jax.tree_util.tree_flatten_with_path(
                   nnx.state(model, lora.LoRA))[0]}
    self.assertLen(adapted, 2 * 7 * 2)    # A and B per weight
    self.assertFalse([p for p in adapted if "visual" in p or "vision" in p])


if __name__ == "__main__":
  absltest.main()
