"""Qwen2.5-VL: vision tower, 3-D RoPE positions and logits vs transformers."""

import dataclasses
import json
import os
import shutil
import tempfile

from absl.testing import absltest
import chex
import jax
import numpy as np
from flax import nnx
import safetensors.numpy

from jaxlab import parallel
from jaxlab.decoding import sampler
from jaxlab.io import hf
from jaxlab.models import qwen2_vl
from jaxlab.models import registry
from jaxlab.nn import splash
from jaxlab.testing import hf_fixtures
from jaxlab.train import lora as lora_lib

torch = None
transformers = None
try:  # reference implementation (CPU torch)
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from transformers import vision_utils  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover
  pass

IMG, VID, VS, VE = 120, 121, 118, 119
PATCH_DIM = 3 * 2 * 4 * 4  # C * T * P * P
EPS = float(np.finfo(np.float32).eps)


def _tol(ref) -> float:
  """float32 rounding of a few-layer network: eps times the accumulation
  depth (inner dims up to 128 summed over ~8 matmul/attention stages, so
  ~2^8 roundings) times the output scale."""
  return 2 ** 8 * EPS * max(1.0, float(np.abs(ref).max()))


def _perturbed(model):
  """`model` with O(1) random weights (the HF init is near zero)."""
  with torch.no_grad():
    for name, p in model.named_parameters():
      noise = 0.2 * torch.randn_like(p)
      p.copy_(1 + noise if ("norm" in name or "ln_q" in name) and
              name.endswith("weight") else noise)
  return model.eval()


def _jax_perturbed(model, seed):
  """A copy of `model` with every parameter moved by N(0, 0.05^2) noise."""
  graphdef, state = nnx.split(model)
  rng = np.random.default_rng(seed)
  state = jax.tree.map(
      lambda x: x + 0.05 * rng.standard_normal(x.shape).astype(x.dtype),
      state)
  return nnx.merge(graphdef, state)


def _export_roundtrip(test, model, cfg, hf_cls, ids, inputs, want=None,
                      loaded_vision=None):
  """save -> transformers `from_pretrained` -> logits equal ours (`want`,
  default `model`'s); and save -> `hf.load` gives the same config (its
  vision config `loaded_vision`, default `cfg.vision`)."""
  d = tempfile.mkdtemp()
  try:
    hf.save(model, cfg, d)
    ref = hf_cls.from_pretrained(d, attn_implementation="eager").eval()
    _, cfg2 = hf.load(d)
  finally:
    shutil.rmtree(d, ignore_errors=True)
  test.assertEqual(cfg2.vision, loaded_vision or cfg.vision)
  test.assertEqual(cfg2.mrope_section, cfg.mrope_section)
  tt = np.where(ids == IMG, 1, np.where(ids == VID, 2, 0))
  kw = {k: torch.tensor(np.asarray(v)) for k, v in inputs.items()}
  with torch.no_grad():
    theirs = ref(input_ids=torch.tensor(ids),
                 mm_token_type_ids=torch.tensor(tt), **kw).logits.numpy()
  ours = np.asarray(model(ids, **inputs)) if want is None else want
  np.testing.assert_allclose(theirs, ours, rtol=0, atol=_tol(ours))


def _jit_logits(model, ids, inputs, attention_mask=None):
  """`model(ids, attention_mask=, **inputs)` as one compiled call: the
  grids are closed over (static) and the M-RoPE positions come from
  `rope_index` outside, as `forward` asks under jit. For a dtype or shapes
  no other test dispatches eagerly (bfloat16, the padded batch), one compile
  is cheaper than compiling each eager op; where other tests already run
  the same shapes eagerly, eager is cheaper (its ops are compiled once per
  process)."""
  kw = dict(inputs)
  grids = {k: kw.pop(k) for k in ("image_grid_thw", "video_grid_thw")
           if k in kw}
  pos, _ = qwen2_vl.rope_index(
      ids, model.cfg, second_per_grid_ts=kw.pop("second_per_grid_ts", None),
      attention_mask=attention_mask, **grids)
  if attention_mask is not None:
    kw["attention_mask"] = attention_mask
  run = nnx.jit(lambda m, ids, kw, pos: m(ids, positions_3bt=pos, **kw,
                                           **grids))
  return np.asarray(run(model, ids, kw, pos))


def _static_grids(grids):
  """{name: [n, 3] grid array} as a hashable static argument."""
  return tuple((k, tuple(map(tuple, np.asarray(v).tolist())))
               for k, v in sorted(grids.items()))


# `model(ids, pixel_values=, pixel_values_videos=, positions_3bt=, **grids)`
# compiled once per shape and grids (static), shared by the tests that run it
# on the same inputs' shapes (an `nnx.jit` per test compiled it again).
_run_with_grids = nnx.jit(
    lambda model, ids, pv, pvv, pos, grids: model(
        ids, pixel_values=pv, pixel_values_videos=pvv, positions_3bt=pos,
        **{k: np.asarray(v) for k, v in grids}),
    static_argnums=5)


def _text_config():
  return dict(
      vocab_size=128, hidden_size=64, intermediate_size=96,
      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
      rms_norm_eps=1e-6, max_position_embeddings=512,
      bos_token_id=1, eos_token_id=2,
      rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                       "mrope_section": [2, 3, 3]})


def _hf_config():
  return transformers.Qwen2_5_VLConfig(
      text_config=_text_config(),
      # patch 4, merge 2, window 16 px: windows of 2x2 merged units, so an
      # 8x12-patch frame (4x6 units) splits into 6 windows.
      vision_config=dict(
          depth=4, hidden_size=32, intermediate_size=48, num_heads=2,
          patch_size=4, temporal_patch_size=2, spatial_merge_size=2,
          window_size=16, out_hidden_size=64, fullatt_block_indexes=[1, 3],
          tokens_per_second=2, in_channels=3),
      image_token_id=IMG, video_token_id=VID, vision_start_token_id=VS,
      vision_end_token_id=VE, attn_implementation="eager")


def _prompt(text_a=(5, 6), text_b=(7, 8, 9), text_c=(10, 11)):
  """text, <vs> image (1, 8, 12) -> 24 tokens <ve>, text, <vs> video
  (2, 8, 8) -> 32 tokens <ve>, text."""
  return ([*text_a, VS] + [IMG] * 24 + [VE, *text_b, VS] + [VID] * 32
          + [VE, *text_c])


@absltest.skipIf(torch is None, "needs torch + transformers")
class Qwen25VLTest(chex.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = hf_fixtures.inductor_cleanup()
    torch.manual_seed(0)
    cls.ref = _perturbed(transformers.Qwen2_5_VLForConditionalGeneration(
        _hf_config()))
    cls.dir = tempfile.mkdtemp()
    cls.ref.save_pretrained(cls.dir)
    cls.model, cls.cfg = hf.load(cls.dir)
    cls.rng = np.random.default_rng(0)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir, ignore_errors=True)
    cls.cleanup()
    super().tearDownClass()

  def _ref_rope_index(self, ids, img=None, vid=None, spg=None, mask=None):
    tt = np.where(ids == IMG, 1, np.where(ids == VID, 2, 0))
    def t(x):
      return None if x is None else torch.tensor(np.asarray(x))

    with torch.no_grad():
      pos, delta = self.ref.model.get_rope_index(
          t(ids), t(tt), t(img), t(vid), t(spg), attention_mask=t(mask))
    return pos.numpy(), delta.numpy().reshape(-1)

  def test_config(self):
    cfg = self.cfg
    self.assertIsInstance(self.model, qwen2_vl.Qwen2VL)
    self.assertEqual(cfg.mrope_section, (2, 3, 3))
    self.assertEqual(cfg.vision.fullatt_block_indexes, (1, 3))
    self.assertEqual((cfg.image_token_id, cfg.video_token_id), (IMG, VID))
    self.assertTrue(cfg.text.qkv_bias)
    self.assertEqual(cfg.text.rope_theta, 10000.0)

  def test_hub_config_and_v5_tensor_names_load_the_same(self):
    """The Hub's flat config.json (text fields at the top, rope_scaling type
    mrope, vision in_chans) and transformers-5-style tensor names
    (model.language_model.*, model.visual.*) give the same model."""
    with open(os.path.join(self.dir, "config.json")) as fh:
      v5 = json.load(fh)
    flat = {k: v for k, v in v5.items() if k != "text_config"}
    flat.update({k: v for k, v in v5["text_config"].items()
                 if k != "rope_parameters"})
    rope = v5["text_config"]["rope_parameters"]
    flat["rope_theta"] = rope["rope_theta"]
    flat["rope_scaling"] = {"type": "mrope",
                            "mrope_section": rope["mrope_section"]}
    flat["vision_config"] = {k: v for k, v in v5["vision_config"].items()
                             if k != "rope_parameters"}
    flat["vision_config"]["in_chans"] = flat["vision_config"].pop(
        "in_channels")
    tensors = safetensors.numpy.load_file(
        os.path.join(self.dir, "model.safetensors"))
    renamed = {}
    for name, arr in tensors.items():
      if name.startswith("visual."):
        name = "model." + name
      elif name.startswith("model."):
        name = "model.language_model." + name[len("model."):]
      renamed[name] = arr
    self.assertIn("model.visual.merger.ln_q.weight", renamed)
    d = tempfile.mkdtemp()
    try:
      with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(flat, fh)
      safetensors.numpy.save_file(renamed,
                                  os.path.join(d, "model.safetensors"))
      model, cfg = hf.load(d)
    finally:
      shutil.rmtree(d, ignore_errors=True)
    self.assertEqual(cfg, self.cfg)
    ids = np.array([_prompt()])
    inputs = self._inputs()
    np.testing.assert_array_equal(model(ids, **inputs),
                                  self.model(ids, **inputs))

  def test_window_plan_matches_transformers(self):
    vcfg = self.cfg.vision
    # Divisible and ragged merged grids, an image and a 2-frame video.
    for grids in ([[1, 8, 12]], [[1, 10, 12], [2, 8, 8]], [[3, 6, 4]],
                  [[1, 2, 2]]):
      g = np.array(grids)
      win, cu = qwen2_vl.window_index(g, vcfg)
      ref_win, ref_cu = vision_utils.get_vision_window_index(
          torch.tensor(g), spatial_merge_size=2, window_size=16,
          patch_size=4)
      np.testing.assert_array_equal(win, ref_win.numpy())
      np.testing.assert_array_equal(cu, ref_cu.numpy())
      np.testing.assert_array_equal(
          qwen2_vl.frame_cu_seqlens(g),
          vision_utils.get_vision_cu_seqlens(torch.tensor(g)).numpy())
      np.testing.assert_array_equal(
          qwen2_vl.vision_rotary_positions(g, 2),
          vision_utils.get_vision_position_ids(torch.tensor(g), 2).numpy())
    # Windowing really splits the frame: 6 windows of 16 patches.
    _, cu = qwen2_vl.window_index(np.array([[1, 8, 12]]), vcfg)
    np.testing.assert_array_equal(np.diff(cu), [16] * 6)
    seg = qwen2_vl.segment_ids(np.array([0, 3, 5]), 5)
    np.testing.assert_array_equal(seg, [0, 0, 0, 1, 1])

  def test_patchify_matches_transformers_processors(self):
    vcfg = self.cfg.vision
    img = self.rng.standard_normal((1, 3, 16, 24)).astype(np.float32)
    # pylint: disable=g-import-not-at-top
    from transformers.models.qwen2_vl import (
        image_processing_pil_qwen2_vl as ip)
    ref, gh, gw = ip.Qwen2VLImageProcessorPil.patchify(None, img[0], 4, 2, 2)
    got, grid = qwen2_vl.patchify(img, vcfg)
    self.assertEqual(grid, (1, gh, gw))
    np.testing.assert_array_equal(got, ref)
    # The video processor module needs torchvision: run its `patchify`
    # source alone (3 frames: the last one repeated to 4).
    import ast
    import inspect
    src_file = os.path.join(os.path.dirname(inspect.getfile(ip)),
                            "video_processing_qwen2_vl.py")
    with open(src_file) as fh:
      tree = ast.parse(fh.read())
    fn = next(n for c in tree.body if isinstance(c, ast.ClassDef)
              for n in c.body if isinstance(n, ast.FunctionDef)
              and n.name == "patchify")
    scope = {"torch": torch}
    code = compile(ast.Module([fn], []), src_file, "exec")
    exec(code, scope)  # pylint: disable=exec-used
    vid = self.rng.standard_normal((3, 3, 16, 8)).astype(np.float32)
    ref, gt, gh, gw = scope["patchify"](None, torch.tensor(vid[None]), 4, 2,
                                        2)
    got, grid = qwen2_vl.patchify(vid, vcfg)
    self.assertEqual(grid, (gt, gh, gw))
    np.testing.assert_array_equal(got, ref[0].numpy())

  def test_vision_tower_matches_transformers(self):
    for grids in ([[1, 8, 12], [2, 8, 8]], [[1, 10, 12]]):
      g = np.array(grids)
      n = int(np.prod(g, 1).sum())
      pv = self.rng.standard_normal((n, PATCH_DIM)).astype(np.float32)
      with torch.no_grad():
        ref = self.ref.model.visual(
            torch.tensor(pv), grid_thw=torch.tensor(g)).pooler_output.numpy()
      got = np.asarray(self.model.visual(pv, g))
      self.assertEqual(got.shape, (n // 4, 64))
      np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(ref))

  def test_vision_tower_splash_segments_match_transformers(self):
    # The splash kernel (Pallas interpreter on CPU) with the frames' and
    # windows' segment ids instead of the dense block-diagonal mask.
    old = splash.INTERPRET
    splash.INTERPRET = True
    self.addCleanup(setattr, splash, "INTERPRET", old)
    tower = nnx.clone(self.model.visual)
    tower.cfg = dataclasses.replace(tower.cfg, attention_impl="splash")
    for blk in tower.blocks:
      blk.cfg = tower.cfg
    g = np.array([[1, 8, 12], [2, 8, 8]])  # 224 patches: pads to 256
    n = int(np.prod(g, 1).sum())
    pv = self.rng.standard_normal((n, PATCH_DIM)).astype(np.float32)
    with torch.no_grad():
      ref = self.ref.model.visual(
          torch.tensor(pv), grid_thw=torch.tensor(g)).pooler_output.numpy()
    got = np.asarray(tower(pv, g))
    np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(ref))
    with self.assertRaisesRegex(ValueError, "vision attention_impl='cudnn'"):
      dataclasses.replace(tower.cfg, attention_impl="cudnn")

  def _scanned(self):
    """The checkpoint loaded with scanned, fully rematerialised layers (the
    language model's and the tower's)."""
    if not hasattr(type(self), "scanned"):
      type(self).scanned = hf.load(self.dir, scan_layers=True, remat="full")
    return type(self).scanned

  def test_scanned_tower_stacks_blocks(self):
    model, cfg = self._scanned()
    self.assertTrue(cfg.vision.scan_layers)
    self.assertTrue(cfg.vision.remat)
    self.assertFalse(hasattr(model.visual, "blocks"))
    stacked = model.visual.scan_blocks[0].qkv.kernel[...]
    self.assertEqual(stacked.shape, (4, 32, 96))
    for i in range(4):  # block i's weights at index i
      np.testing.assert_array_equal(
          stacked[i], self.model.visual.blocks[i].qkv.kernel[...])
    np.testing.assert_array_equal(cfg.vision.full_attention_layers(),
                                  [False, True, False, True])

  def test_scanned_tower_equals_unscanned_and_transformers(self):
    # Windowed blocks 0, 2 and full-attention blocks 1, 3 under one scan
    # (the same float32 ops, so within the rounding tolerance of each other
    # and of transformers).
    model, _ = self._scanned()
    for grids in ([[1, 8, 12], [2, 8, 8]], [[1, 10, 12]]):
      g = np.array(grids)
      n = int(np.prod(g, 1).sum())
      pv = self.rng.standard_normal((n, PATCH_DIM)).astype(np.float32)
      want = np.asarray(self.model.visual(pv, g))
      got = np.asarray(model.visual(pv, g))
      np.testing.assert_allclose(got, want, rtol=0, atol=_tol(want))
      jitted = np.asarray(nnx.jit(lambda m, x, g=g: m(x, g))(model.visual,
                                                              pv))
      np.testing.assert_allclose(jitted, want, rtol=0, atol=_tol(want))
      with torch.no_grad():
        ref = self.ref.model.visual(
            torch.tensor(pv), grid_thw=torch.tensor(g)).pooler_output.numpy()
      np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(ref))

  def test_scanned_logits_match_transformers(self):
    model, _ = self._scanned()
    ids = np.array([_prompt()])
    inputs = self._inputs()
    ref = self._ref_logits(ids, inputs)
    got = np.asarray(model(ids, **inputs))
    np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(ref))

  def test_scanned_gradients_equal_unscanned(self):
    """d(loss)/d(params) of the tower: scanned + remat == unrolled, block
    by block (the stacked gradient's row i is block i's)."""
    model, _ = self._scanned()
    g = np.array([[1, 8, 12], [2, 8, 8]])
    n = int(np.prod(g, 1).sum())
    pv = self.rng.standard_normal((n, PATCH_DIM)).astype(np.float32)
    w = self.rng.standard_normal((n // 4, 64)).astype(np.float32)

    @nnx.jit
    def grads(tower):
      return nnx.grad(lambda t: (t(pv, g) * w).sum())(tower)

    got = grads(model.visual)
    want = grads(self.model.visual)
    for i in range(4):
      for path in (("qkv", "kernel"), ("proj", "bias"),
                   ("down_proj", "kernel"), ("norm1", "scale")):
        a = got["scan_blocks"][0][path[0]][path[1]][...][i]
        b = want["blocks"][i][path[0]][path[1]][...]
        np.testing.assert_allclose(a, b, rtol=0, atol=_tol(b))
    b = want["patch_embed"]["kernel"][...]
    np.testing.assert_allclose(got["patch_embed"]["kernel"][...], b, rtol=0,
                               atol=_tol(b))

  def test_scanned_export_loads_in_transformers(self):
    """A scanned model saves its stacked blocks as the per-block tensors:
    transformers loads them with the same logits."""
    model, cfg = self._scanned()
    model = _jax_perturbed(model, 6)
    _export_roundtrip(self, model, cfg,
                      transformers.Qwen2_5_VLForConditionalGeneration,
                      np.array([_prompt()]), self._inputs(),
                      loaded_vision=dataclasses.replace(
                          cfg.vision, scan_layers=False, remat=False))

  def test_vision_scan_follows_the_decoder(self):
    base = {"dim": 64, "num_heads": 4, "num_kv_heads": 2, "num_layers": 1,
            "vision": {"hidden_size": 32, "num_heads": 2}}
    cfg = qwen2_vl.config_from_dict(
        {**base, "scan_layers": True, "remat": "minimal"}, vocab_size=16)
    self.assertTrue(cfg.vision.scan_layers)
    self.assertEqual(cfg.vision.remat, "minimal")
    cfg = qwen2_vl.config_from_dict(
        {**base, "scan_layers": True,
         "vision": {**base["vision"], "scan_layers": False}}, vocab_size=16)
    self.assertFalse(cfg.vision.scan_layers)
    self.assertFalse(qwen2_vl.config_from_dict(
        base, vocab_size=16).vision.scan_layers)
    with self.assertRaisesRegex(ValueError, "remat='some'"):
      qwen2_vl.VisionConfig(remat="some")

  def test_rope_index_matches_transformers(self):
    img = np.array([[1, 8, 12]])
    vid = np.array([[2, 8, 8]])
    ids = np.array([_prompt()])
    for spg in (None, [1.5], [0.3]):
      pos, delta = qwen2_vl.rope_index(ids, self.cfg, img, vid, spg)
      ref_pos, ref_delta = self._ref_rope_index(ids, img, vid, spg)
      np.testing.assert_array_equal(pos, ref_pos)
      np.testing.assert_array_equal(delta, ref_delta)
    # Time-aligned video positions: frame 1 at floor(1 * 2 * 1.5) = 3.
    pos, _ = qwen2_vl.rope_index(ids, self.cfg, img, vid, [1.5])
    first_video = ids[0].tolist().index(VID)
    self.assertEqual(pos[0, 0, first_video + 16] - pos[0, 0, first_video], 3)
    # Two images and a video in one row, a text-only row, left padding.
    two = ([VS] + [IMG] * 24 + [VE, 3, VS] + [IMG] * 6 + [VE, 4, VS]
           + [VID] * 32 + [VE])
    rows = [two, [3, 4, 5, 6]]
    width = max(map(len, rows))
    ids = np.zeros((2, width), np.int64)
    mask = np.zeros((2, width), np.int64)
    for r, row in enumerate(rows):
      ids[r, width - len(row):] = row
      mask[r, width - len(row):] = 1
    img2 = np.array([[1, 8, 12], [1, 4, 6]])
    pos, delta = qwen2_vl.rope_index(ids, self.cfg, img2, vid, [2.0],
                                     attention_mask=mask)
    ref_pos, ref_delta = self._ref_rope_index(ids, img2, vid, [2.0], mask)
    np.testing.assert_array_equal(pos, ref_pos)
    np.testing.assert_array_equal(delta, ref_delta)

  def test_rope_index_errors(self):
    img = np.array([[1, 8, 12]])
    short = np.array([[VS] + [IMG] * 20 + [VE]])  # 24 tokens needed
    with self.assertRaisesRegex(ValueError, "does not match"):
      qwen2_vl.rope_index(short, self.cfg, img)
    cut = np.array([[VS] + [IMG] * 20])  # the row ends inside the image
    with self.assertRaisesRegex(ValueError, "does not match"):
      qwen2_vl.rope_index(cut, self.cfg, img)
    with self.assertRaisesRegex(ValueError, "than grids"):
      qwen2_vl.rope_index(np.array([[VS, IMG, VE]]), self.cfg)

  def test_mrope_tables_match_transformers(self):
    ids = np.array([_prompt()])
    img, vid = np.array([[1, 8, 12]]), np.array([[2, 8, 8]])
    pos, _ = qwen2_vl.rope_index(ids, self.cfg, img, vid, [1.5])
    cos, sin = qwen2_vl.mrope_cos_sin(pos, self.cfg)
    x = torch.zeros(1, ids.shape[1], 64)
    with torch.no_grad():
      ref_cos, ref_sin = self.ref.model.language_model.rotary_emb(
          x, torch.tensor(pos))
    # Angles up to ~60 rad: cos/sin of a float32 angle differ by ~angle*eps.
    np.testing.assert_allclose(cos, ref_cos.numpy(), rtol=0, atol=64 * EPS)
    np.testing.assert_allclose(sin, ref_sin.numpy(), rtol=0, atol=64 * EPS)

  def _inputs(self):
    return dict(
        pixel_values=self.rng.standard_normal((96, PATCH_DIM)).astype(
            np.float32),
        image_grid_thw=np.array([[1, 8, 12]]),
        pixel_values_videos=self.rng.standard_normal(
            (128, PATCH_DIM)).astype(np.float32),
        video_grid_thw=np.array([[2, 8, 8]]),
        second_per_grid_ts=[1.5])

  def _ref_logits(self, ids, inputs, mask=None):
    tt = np.where(ids == IMG, 1, np.where(ids == VID, 2, 0))
    kw = {k: torch.tensor(np.asarray(v)) for k, v in inputs.items()}
    if mask is not None:
      kw["attention_mask"] = torch.tensor(mask)
    with torch.no_grad():
      return self.ref(input_ids=torch.tensor(ids),
                      mm_token_type_ids=torch.tensor(tt), **kw).logits.numpy()

  def test_logits_match_transformers(self):
    ids = np.array([_prompt()])
    inputs = self._inputs()
    ref = self._ref_logits(ids, inputs)
    got = np.asarray(self.model(ids, **inputs))
    self.assertEqual(got.shape, (1, ids.shape[1], 128))
    np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(ref))

  def test_logits_with_left_padding(self):
    rows = [_prompt(), _prompt(text_a=(), text_b=(7,), text_c=())]
    width = max(map(len, rows))
    ids = np.zeros((2, width), np.int64)
    mask = np.zeros((2, width), np.int64)
    for r, row in enumerate(rows):
      ids[r, width - len(row):] = row
      mask[r, width - len(row):] = 1
    base = self._inputs()
    inputs = dict(
        pixel_values=np.concatenate([base["pixel_values"]] * 2),
        image_grid_thw=np.array([[1, 8, 12]] * 2),
        pixel_values_videos=np.concatenate([base["pixel_values_videos"]] * 2),
        video_grid_thw=np.array([[2, 8, 8]] * 2),
        second_per_grid_ts=[1.5, 0.5])
    ref = self._ref_logits(ids, inputs, mask)
    got = _jit_logits(self.model, ids, inputs, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], ref[real], rtol=0,
                               atol=_tol(ref[real]))

  def test_kv_cache_decoding_matches_full_forward(self):
    """Prefill with the images, then text tokens one at a time at M-RoPE
    positions index + delta (`decode_positions`), through the KV cache."""
    ids = np.array([_prompt()])
    inputs = self._inputs()
    full = np.asarray(self.model(ids, **inputs))
    _, delta = qwen2_vl.rope_index(
        ids, self.cfg, inputs["image_grid_thw"], inputs["video_grid_thw"],
        inputs["second_per_grid_ts"])
    prefill = ids.shape[1] - 3
    cache = self.model.language_model.init_cache(1, 96)
    out = self.model.forward(ids[:, :prefill], cache=cache, **inputs)
    np.testing.assert_allclose(out.logits, full[:, :prefill], rtol=0,
                               atol=_tol(full))
    cache = out.cache
    for t in range(prefill, ids.shape[1]):
      out = self.model.forward(
          ids[:, t:t + 1], cache=cache,
          positions_3bt=qwen2_vl.decode_positions(delta, t))
      cache = out.cache
      np.testing.assert_allclose(out.logits[:, 0], full[:, t], rtol=0,
                                 atol=_tol(full))

  def test_generate_with_images_matches_transformers(self):
    """`sampler.generate(multimodal=...)`, a ragged left-padded batch (row 0:
    an image and a video, row 1: two images): greedy tokens == transformers'
    `generate(do_sample=False)`, and the KV-cached log-probs == those of
    one no-cache forward over prompt + generated tokens."""
    rows = [[5, 6, VS] + [IMG] * 24 + [VE, 7, VS] + [VID] * 32 + [VE, 8],
            [VS] + [IMG] * 6 + [VE, 3, VS] + [IMG] * 4 + [VE, 9, 10]]
    base = self._inputs()
    mm = dict(
        pixel_values=np.concatenate([
            base["pixel_values"], self.rng.standard_normal(
                (40, PATCH_DIM)).astype(np.float32)]),
        image_grid_thw=np.array([[1, 8, 12], [1, 4, 6], [1, 4, 4]]),
        pixel_values_videos=base["pixel_values_videos"],
        video_grid_thw=base["video_grid_thw"], second_per_grid_ts=[1.5])
    new = 5
    res = sampler.generate(self.model, rows, max_new_tokens=new,
                           multimodal=mm)
    width = max(map(len, rows))
    ids = np.zeros((2, width), np.int64)
    mask = np.zeros((2, width), np.int64)
    for r, row in enumerate(rows):
      ids[r, width - len(row):] = row
      mask[r, width - len(row):] = 1
    tt = np.where(ids == IMG, 1, np.where(ids == VID, 2, 0))
    kw = {k: torch.tensor(np.asarray(v)) for k, v in mm.items()}
    with torch.no_grad():
      want = self.ref.generate(
          input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
          mm_token_type_ids=torch.tensor(tt), max_new_tokens=new,
          do_sample=False, eos_token_id=None, pad_token_id=0, **kw)
    self.assertEqual(res.tokens, want[:, width:].tolist())
    # Cached decoding == one forward over prompt + generated tokens.
    full_ids = np.concatenate([ids, np.array(res.tokens)], 1)
    full_mask = np.concatenate([mask, np.ones((2, new), np.int64)], 1)
    h, prefill_kw, _ = self.model.multimodal_inputs(full_ids, full_mask,
                                                    **mm)
    logits = np.asarray(nnx.jit(
        lambda m, h, mask, pos: m.forward(  # (eager dispatch is slow)
            inputs_embeds=h, attention_mask=mask, positions_3bt=pos).logits)(
                self.model, h, full_mask, prefill_kw["positions_3bt"]))
    logp = jax.nn.log_softmax(logits[:, width - 1:-1], -1)
    want_lp = np.take_along_axis(np.asarray(logp),
                                 np.array(res.tokens)[..., None], -1)[..., 0]
    np.testing.assert_allclose(res.model_logprobs, want_lp, rtol=0,
                               atol=_tol(logits))
    with self.assertRaisesRegex(ValueError, "placeholder"):
      sampler.generate(self.model, [rows[1][:-6]], max_new_tokens=2,
                       multimodal=dict(pixel_values=mm["pixel_values"][96:],
                                       image_grid_thw=[[1, 4, 6], [1, 4, 4]]))

  def test_jit_matches_eager(self):
    ids = np.array([_prompt()])
    inputs = self._inputs()
    grids = {k: inputs.pop(k) for k in ("image_grid_thw", "video_grid_thw")}
    pos, _ = qwen2_vl.rope_index(ids, self.cfg, second_per_grid_ts=[1.5],
                                 **grids)

    got = _run_with_grids(self.model, ids, inputs["pixel_values"],
                          inputs["pixel_values_videos"], pos,
                          _static_grids(grids))
    eager = self.model(ids, **inputs, **grids)
    np.testing.assert_allclose(got, eager, rtol=0, atol=_tol(eager))

  def test_bfloat16_load(self):
    model, cfg = hf.load(self.dir, dtype="bfloat16")
    self.assertEqual(cfg.vision.dtype, "bfloat16")
    kernel = model.visual.blocks[0].qkv.kernel[...]
    self.assertEqual(kernel.dtype, jax.numpy.bfloat16)
    ids = np.array([_prompt()])
    inputs = self._inputs()
    got = _jit_logits(model, ids, inputs)
    want = np.asarray(self.model(ids, **inputs))
    self.assertEqual(got.dtype, np.float32)
    # bfloat16 (eps 2^-8) rounding through ~8 stages: a few eps of the scale.
    self.assertLess(np.abs(got - want).max(),
                    2 ** 4 * 2 ** -8 * np.abs(want).max())

  def test_export_loads_in_transformers(self):
    """Our (perturbed) model -> hf.save -> transformers: same logits on a
    text + image + video prompt."""
    model = _jax_perturbed(self.model, 5)
    _export_roundtrip(self, model, self.cfg,
                      transformers.Qwen2_5_VLForConditionalGeneration,
                      np.array([_prompt()]), self._inputs())

  def test_lora_finetune_exports_merged_weights(self):
    """LoRA on the language model (the targets name its weights, not the
    tower's kernels: the tower stays frozen): one SGD step on a text +
    image prompt; hf.save writes W + (alpha / r) A @ B, and transformers
    loads it with the logits of the merged model."""
    model = _jax_perturbed(self.model, 8)  # a copy
    lora_lib.add_lora(model, rank=2, alpha=4.0,
                      targets=("q_dnh", "v_dkh", "up_df"), rngs=nnx.Rngs(0))
    ids = np.array([[5, VS] + [IMG] * 6 + [VE, 6, 7, 8]])
    inputs = dict(pixel_values=self.rng.standard_normal(
        (24, PATCH_DIM)).astype(np.float32),
                  image_grid_thw=np.array([[1, 4, 6]]))
    graphdef, factors, rest = nnx.split(model, lora_lib.LoRA, ...)
    self.assertFalse(any("_lora" in str(p) for p, _ in
                         nnx.to_flat_state(nnx.state(model.visual))))

    def logits(factors, rest):
      m = nnx.merge(graphdef, factors, rest, copy=True)  # as the trainer
      lora_lib.merge_lora(m)
      return m(ids, **inputs)

    def loss(factors, rest):
      logp = jax.nn.log_softmax(logits(factors, rest)[0, :-1], -1)
      return -jax.numpy.take_along_axis(logp, ids[0, 1:, None], -1).mean()

    step = jax.jit(lambda f, r: jax.tree.map(lambda x, g: x - 2.0 * g, f,
                                             jax.grad(loss)(f, r)))
    factors = step(factors, rest)
    run = jax.jit(logits)
    tuned = np.asarray(run(factors, rest))
    base = np.asarray(run(jax.tree.map(jax.numpy.zeros_like, factors), rest))
    # The step changed the function well beyond the comparison tolerance.
    self.assertGreater(np.abs(tuned - base).max(), 100 * _tol(tuned))
    _export_roundtrip(self, nnx.merge(graphdef, factors, rest), self.cfg,
                      transformers.Qwen2_5_VLForConditionalGeneration, ids,
                      inputs, want=tuned)

  def test_mesh_placement(self):
    """hf.load(mesh=, rules=) on 8 devices: the language model's and the
    vision tower's params sharded by their logical axes; logits == the
    unsharded model's."""
    if jax.device_count() < 8:
      self.skipTest("needs 8 (fake) devices")
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    model, _ = hf.load(self.dir, mesh=mesh, rules=parallel.DEFAULT_RULES)
    up = model.language_model.layers[0].mlp.up_df[...]
    self.assertEqual(up.sharding.spec, jax.sharding.PartitionSpec(
        "fsdp", "tensor"))
    self.assertEqual(up.addressable_shards[0].data.shape, (32, 48))
    # The tower's fused qkv [32, 96]: (embed, heads) -> (fsdp, tensor).
    qkv = model.visual.blocks[0].qkv.kernel[...]
    self.assertEqual(qkv.sharding.spec, jax.sharding.PartitionSpec(
        "fsdp", "tensor"))
    self.assertEqual(qkv.addressable_shards[0].data.shape, (16, 48))
    down = model.visual.blocks[0].down_proj.kernel[...]
    self.assertEqual(down.sharding.spec, jax.sharding.PartitionSpec(
        "tensor", "fsdp"))
    ids = np.array([_prompt()])
    inputs = self._inputs()
    grids = {k: inputs.pop(k) for k in ("image_grid_thw", "video_grid_thw")}
    pos, _ = qwen2_vl.rope_index(ids, self.cfg, second_per_grid_ts=[1.5],
                                 **grids)

    args = (ids, inputs["pixel_values"], inputs["pixel_values_videos"], pos,
            _static_grids(grids))
    with jax.set_mesh(mesh):
      got = _run_with_grids(model, *args)
    # Unsharded: the executable test_jit_matches_eager compiled (same
    # shapes), when that test ran first in this process.
    want = _run_with_grids(self.model, *args)
    np.testing.assert_allclose(got, want, rtol=0, atol=_tol(want))

  def test_decoder_rope_tables_hook(self):
    lm = self.model.language_model
    ids = np.array([[3, 4, 5, 6, 7, 8]])
    pos = np.array([[0, 1, 2, 5, 6, 7]])
    cos, sin = lm.rotary(pos, seq_len=6)
    # The tables replace RoPE at `positions`; the mask stays causal in order.
    got = lm.forward(ids, rope_tables=(cos, sin)).logits
    want = lm.forward(ids, positions=pos).logits
    np.testing.assert_allclose(got, want, rtol=0, atol=_tol(want))
    with self.assertRaisesRegex(ValueError, "exclusive"):
      lm.forward(ids, rope_tables=(cos, sin),
                 rope_pair_weights=np.ones(8, np.float32))

  def test_text_only_equals_plain_decoder(self):
    ids = np.array([[3, 4, 5, 6, 7]])
    got = self.model(ids)
    plain = self.model.language_model(ids)
    np.testing.assert_allclose(got, plain, rtol=0, atol=_tol(plain))

  def test_bad_grid_raises(self):
    with self.assertRaisesRegex(ValueError, "spatial_merge_size"):
      self.model.visual(np.zeros((15, PATCH_DIM), np.float32), [[1, 3, 5]])
    with self.assertRaisesRegex(ValueError, "pixel_values of shape"):
      self.model.visual(np.zeros((10, PATCH_DIM), np.float32), [[1, 4, 4]])

  def test_registry_default_mrope_section(self):
    cfg = qwen2_vl.config_from_dict(
        {"dim": 64, "num_heads": 1, "num_kv_heads": 1, "head_dim": 128,
         "vision": {"hidden_size": 32, "num_heads": 2}}, vocab_size=16)
    self.assertEqual(cfg.mrope_section, (16, 24, 24))

  def test_placeholder_mismatch_raises(self):
    ids = np.array([[VS] + [IMG] * 23 + [VE]])
    inputs = self._inputs()
    with self.assertRaisesRegex(ValueError, "placeholder"):
      self.model(ids, pixel_values=inputs["pixel_values"],
                 image_grid_thw=inputs["image_grid_thw"])

  def test_registry_builder(self):
    spec = registry.get_spec(
        {"name": "qwen2_5_vl", "vocab_size": 128, "dim": 64, "num_layers": 1,
         "num_heads": 4, "num_kv_heads": 2, "mlp_dim": 96, "qkv_bias": True,
         "image_token_id": IMG, "video_token_id": VID,
         "mrope_section": [2, 3, 3],
         "vision": {"depth": 2, "hidden_size": 32, "intermediate_size": 48,
                    "num_heads": 2, "patch_size": 4, "window_size": 16,
                    "fullatt_block_indexes": [1]}})
    model = spec.factory()
    self.assertIsInstance(model, qwen2_vl.Qwen2VL)
    self.assertEqual(spec.config.vision.out_hidden_size, 64)
    ids = np.array([_prompt()])
    logits = model(ids, **self._inputs())
    self.assertEqual(logits.shape, (1, ids.shape[1], 128))
    self.assertTrue(np.all(np.isfinite(logits)))



@absltest.skipIf(torch is None, "needs torch + transformers")
class Qwen2VLTest(chex.TestCase):
  """Qwen2-VL: LayerNorm + quick_gelu MLP tower, no windows."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = hf_fixtures.inductor_cleanup()
    torch.manual_seed(1)
    cfg = transformers.Qwen2VLConfig(
        text_config=_text_config(),
        vision_config=dict(depth=3, embed_dim=32, hidden_size=64,
                           mlp_ratio=2, num_heads=2, patch_size=4,
                           temporal_patch_size=2, spatial_merge_size=2,
                           in_channels=3),
        image_token_id=IMG, video_token_id=VID, vision_start_token_id=VS,
        vision_end_token_id=VE, attn_implementation="eager")
    cls.ref = _perturbed(transformers.Qwen2VLForConditionalGeneration(cfg))
    cls.dir = tempfile.mkdtemp()
    cls.ref.save_pretrained(cls.dir)
    cls.model, cls.cfg = hf.load(cls.dir)
    cls.rng = np.random.default_rng(1)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.dir, ignore_errors=True)
    cls.cleanup()
    super().tearDownClass()

  def test_config(self):
    v = self.cfg.vision
    self.assertEqual(v.variant, "qwen2_vl")
    self.assertEqual((v.hidden_size, v.out_hidden_size, v.intermediate_size),
                     (32, 64, 64))
    self.assertEqual(v.hidden_act, "quick_gelu")

  def test_registry_builder(self):
    spec = registry.get_spec(
        {"name": "qwen2_vl", "vocab_size": 128, "dim": 64, "num_layers": 1,
         "num_heads": 4, "num_kv_heads": 2, "mlp_dim": 96, "qkv_bias": True,
         "vision": {"depth": 1, "hidden_size": 32, "intermediate_size": 64,
                    "num_heads": 2, "patch_size": 4}})
    self.assertEqual(spec.config.vision.variant, "qwen2_vl")
    self.assertEqual(spec.config.vision.hidden_act, "quick_gelu")
    self.assertEqual(spec.config.mrope_section, (2, 3, 3))
    model = spec.factory()
    self.assertTrue(hasattr(model.visual.blocks[0], "fc1"))

  def test_vision_tower_matches_transformers(self):
    g = np.array([[1, 8, 12], [2, 8, 8]])
    n = int(np.prod(g, 1).sum())
    pv = self.rng.standard_normal((n, PATCH_DIM)).astype(np.float32)
    with torch.no_grad():
      ref = self.ref.model.visual(
          torch.tensor(pv), grid_thw=torch.tensor(g)).pooler_output.numpy()
    got = np.asarray(self.model.visual(pv, g))
    np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(ref))
    # Scanned (every block full-attention) + remat: the same features.
    scanned, cfg = hf.load(self.dir, scan_layers=True, remat="minimal")
    self.assertEqual(scanned.visual.scan_blocks[0].fc1.kernel.shape[0], 3)
    self.assertTrue(all(cfg.vision.full_attention_layers()))
    got = np.asarray(nnx.jit(lambda m, x: m(x, g))(scanned.visual, pv))
    np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(ref))

  def test_export_loads_in_transformers(self):
    model = _jax_perturbed(self.model, 6)
    inputs = dict(
        pixel_values=self.rng.standard_normal((96, PATCH_DIM)).astype(
            np.float32), image_grid_thw=np.array([[1, 8, 12]]))
    ids = np.array([[5, 6, VS] + [IMG] * 24 + [VE, 7, 8]])
    _export_roundtrip(self, model, self.cfg,
                      transformers.Qwen2VLForConditionalGeneration, ids,
                      inputs)

  def test_logits_and_positions_match_transformers(self):
    ids = np.array([_prompt()])
    tt = np.where(ids == IMG, 1, np.where(ids == VID, 2, 0))
    inputs = dict(
        pixel_values=self.rng.standard_normal((96, PATCH_DIM)).astype(
            np.float32),
        image_grid_thw=np.array([[1, 8, 12]]),
        pixel_values_videos=self.rng.standard_normal(
            (128, PATCH_DIM)).astype(np.float32),
        video_grid_thw=np.array([[2, 8, 8]]))
    kw = {k: torch.tensor(v) for k, v in inputs.items()}
    with torch.no_grad():
      ref = self.ref(input_ids=torch.tensor(ids),
                     mm_token_type_ids=torch.tensor(tt), **kw).logits.numpy()
      ref_pos, _ = self.ref.model.get_rope_index(
          torch.tensor(ids), torch.tensor(tt), kw["image_grid_thw"],
          kw["video_grid_thw"])
    pos, _ = qwen2_vl.rope_index(ids, self.cfg, inputs["image_grid_thw"],
                                 inputs["video_grid_thw"])
    np.testing.assert_array_equal(pos, ref_pos.numpy())
    got = np.asarray(self.model(ids, **inputs))
    np.testing.assert_allclose(got, ref, rtol=0, atol=_tol(ref))


if __name__ == "__main__":
  absltest.main()
