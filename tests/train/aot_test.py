"""AOT compilation for a TPU topology from this CPU (`jaxlab.train.aot`).

* A tiny decoder's train step compiles for v5e:2x2 (4 chips, FSDP over all)
  and the per-chip argument bytes that libtpu reports equal, exactly, the
  bytes computed here from the abstract state's shapes and shardings plus
  the batch shard (the RNG key is unused by the LM loss, so jit drops it).
  The config's sizes are multiples of the TPU tile (128 lanes), so no array
  is padded, except the scalars (the optimizer step and the schedule
  counts), which a TPU lays out as one 128-element tile of 32-bit words:
  512 bytes each.
* A batch that cannot fit gives one HbmOomError naming the knobs.
* The collective parser on a hand-written HLO snippet (no libtpu needed).

Skipped (with the reason) when libtpu is not importable: `pip install
'jax[tpu]==<jax version>'`, the `tpu` extra.
"""

import json
import math
import os
import re
import tempfile
import unittest

from jaxlab.train import aot

aot.configure_host_env()

from absl.testing import absltest  # pylint: disable=g-import-not-at-top
import jax  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from jaxlab.configs import lm_tiny  # pylint: disable=g-import-not-at-top

_NO_LIBTPU = ("libtpu is not installed: pip install "
              f"'jax[tpu]=={jax.__version__}' (the `tpu` extra) to compile "
              "for TPU topologies")
# The TPU layout of a scalar or of a 1-D array of < 128 32-bit words: one
# T(128) tile of 4-byte words.
_TILE_BYTES = 128 * 4


def _config(**train):
  c = lm_tiny.get_config("tiny")
  # Every per-chip dimension a multiple of 128 (or whole and small for the
  # head counts): dim 512 / fsdp 4 = 128, head_dim 128, mlp 512, vocab 512.
  c.model.update(vocab_size=512, dim=512, num_layers=2, num_heads=4,
                 num_kv_heads=2, head_dim=128, mlp_dim=512)
  c.mesh.update(data=1, fsdp=-1, tensor=1)
  c.train.update(**{"batch_size": 8, "seq_len": 128, **train})
  return c


HLO = """\
HloModule jit_step, entry_computation_layout={(f32[8,128]{1,0})->f32[8,128]{1,0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%body (p: (s32[], f32[8,128])) -> (s32[], f32[8,128]) {
  %p = (s32[], f32[8,128]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %w = f32[8,128]{1,0} get-tuple-element(%p), index=1
  %ag = f32[32,128]{1,0} all-gather(%w), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  %rs = f32[8,128]{1,0} reduce-scatter(%ag), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
  ROOT %t = (s32[], f32[8,128]{1,0}) tuple(%i, %rs)
}

%cond (p: (s32[], f32[8,128])) -> pred[] {
  %p = (s32[], f32[8,128]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(16)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: f32[8,128]) -> f32[8,128] {
  %a = f32[8,128]{1,0} parameter(0)
  %ars = f32[8,128]{1,0} all-reduce-start(%a), channel_id=3, replica_groups={{0,1,2,3}}, to_apply=%add
  %ard = f32[8,128]{1,0} all-reduce-done(%ars)
  %ags = (bf16[4,128]{1,0}, bf16[16,128]{1,0}) all-gather-start(%c), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}
  %agd = bf16[16,128]{1,0} all-gather-done(%ags)
  %cp = f32[8,128]{1,0} collective-permute(%ard), channel_id=5, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %c = bf16[4,128]{1,0} convert(%cp)
  %z = s32[] constant(0)
  %init = (s32[], f32[8,128]{1,0}) tuple(%z, %cp)
  %loop = (s32[], f32[8,128]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"16"}}
  %splash_mha_fwd.3 = f32[8,128]{1,0} custom-call(%cp), custom_call_target="tpu_custom_call", metadata={op_name="jit(step)/pallas_call"}
  ROOT %out = f32[8,128]{1,0} get-tuple-element(%loop), index=1
}
"""


class CollectiveParserTest(absltest.TestCase):

  def test_kinds_counts_bytes(self):
    got = aot.parse_collectives(HLO)
    f32_8x128 = 8 * 128 * 4
    gathered = 32 * 128 * 4
    # Groups of 4: each chip moves 3/4 of a gather / scatter, twice that
    # for an all-reduce, all of a permute.
    self.assertEqual(got, {
        # Once in ENTRY (start/done counted once).
        "all-reduce": {"count": 1, "bytes": f32_8x128,
                       "traffic_bytes": 2 * 3 * f32_8x128 // 4},
        # The async start's tuple minus its operand: the gathered result.
        # Plus 16 loop iterations of the gather in the body (result bytes).
        "all-gather": {"count": 1 + 16,
                       "bytes": 16 * 128 * 2 + 16 * gathered,
                       "traffic_bytes": 3 * (16 * 128 * 2 + 16 * gathered)
                                        // 4},
        # Reduce-scatter: its (larger) input, 16 times.
        "reduce-scatter": {"count": 16, "bytes": 16 * gathered,
                           "traffic_bytes": 3 * 16 * gathered // 4},
        "collective-permute": {"count": 1, "bytes": f32_8x128,
                               "traffic_bytes": f32_8x128},
    })

  def test_trip_count_from_the_condition_without_annotation(self):
    # libtpu's optimised HLO has no known_trip_count: `i < 16` gives it.
    plain = HLO.replace(', backend_config={"known_trip_count":{"n":"16"}}',
                        "")
    self.assertNotIn("known_trip_count", plain)
    self.assertEqual(aot.parse_collectives(plain),
                     aot.parse_collectives(HLO))

  def test_group_size_spellings(self):
    self.assertEqual(aot._group_size(
        "x = f32[8] all-reduce(y), replica_groups={{0,1},{2,3}}"), 2)
    self.assertEqual(aot._group_size(
        "x = f32[8] all-gather(y), replica_groups=[2,8]<=[16]"), 8)
    self.assertEqual(aot._group_size(
        "x = f32[8] all-reduce(y), replica_groups=mesh['axis_0'=2,"
        "'axis_1'=4] {'axis_1'}, to_apply=%add"), 4)
    self.assertIsNone(aot._group_size("x = f32[8] collective-permute(y)"))
    self.assertEqual(aot.custom_calls(HLO), {"tpu_custom_call": 1})
    self.assertEqual(aot.kernels(HLO), {"splash_mha_fwd": 1})
    # A generic instruction name: the op_name metadata names it.
    self.assertEqual(aot.kernels(HLO.replace("%splash_mha_fwd.3",
                                             "%custom-call.7")),
                     {"pallas_call": 1})

  def test_roofline_is_the_largest_term(self):
    chip = aot.CHIPS["v5e"]
    r = aot.roofline(chip, flops=chip.peak_bf16_flops * 2.0,
                     hbm_bytes=chip.hbm_bandwidth * 0.5,
                     collective_bytes=chip.ici_bandwidth * 1.0)
    self.assertAlmostEqual(r["step_lower_bound_s"], 2.0)
    self.assertEqual(r["bound_by"], "compute")

  def test_overflow_message_for_a_program_libtpu_compiled(self):
    gib = 1 << 30
    mem = {"total_bytes": 16.39 * gib, "argument_bytes": 3.45 * gib,
           "temp_bytes": 12.94 * gib, "hbm_bytes": 16 * gib, "fits": False}
    report = {"chip": {"name": "v5e"}, "train_step": {"memory": mem}}
    msg = aot.overflow_message(report)
    self.assertIn("the train step needs 16.39 GiB per chip (3.45 arguments "
                  "+ 12.94 temporaries) but a v5e has 16.00 GiB", msg)
    self.assertIn("loss.chunk_size", msg)
    mem["fits"] = True
    self.assertIsNone(aot.overflow_message(report))

  def test_chip_of_topology_names(self):
    self.assertEqual(aot.chip_of("v5e:2x2").name, "v5e")
    self.assertEqual(aot.chip_of("v5p:2x2x4").name, "v5p")
    self.assertEqual(aot.chip_of("v6e:4x4").name, "v6e")
    with self.assertRaisesRegex(ValueError, "unknown TPU"):
      aot.chip_of("h100:8")


@unittest.skipUnless(aot.libtpu_available(), _NO_LIBTPU)
class TpuCompileTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.devices = aot.topology_devices("v5e:2x2")

  def test_topology(self):
    self.assertLen(self.devices, 4)
    self.assertEqual(self.devices[0].device_kind, "TPU v5 lite")
    self.assertEqual(aot.chip_of(self.devices[0]).name, "v5e")

  def test_argument_bytes_are_state_plus_batch_plus_key(self):
    config = _config()
    rep = aot.compile_train_step(config, self.devices)
    ts = rep["_train_state"]
    # Independently: each leaf's shard shape from its NamedSharding.
    state_bytes, n_scalars = 0, 0
    for leaf in jax.tree.leaves(ts.state):
      shard = leaf.sharding.shard_shape(leaf.shape)
      if not shard:
        n_scalars += 1
        continue
      self.assertEqual(shard[-1] % 128, 0, (leaf.shape, shard))
      state_bytes += math.prod(shard) * np.dtype(leaf.dtype).itemsize
    self.assertGreaterEqual(n_scalars, 1)  # opt.step, schedule counts
    # The batch: 5 arrays [8 / 4 chips, 128] of 4-byte words per chip.
    example = aot.lm_example(128)
    batch_bytes = sum(2 * 128 * np.asarray(x).dtype.itemsize
                      for x in example.values())
    # The RNG key is not an argument of the executable: `lm_loss` ignores
    # it and jax.jit drops unused arguments (keep_unused=False).
    key_bytes = 0
    expected = state_bytes + n_scalars * _TILE_BYTES + batch_bytes + key_bytes
    mem = rep["memory"]
    self.assertEqual(mem["argument_bytes"], expected,
                     f"state {state_bytes} + {n_scalars} scalars + batch "
                     f"{batch_bytes} + key {key_bytes}")
    # The state is donated: its buffers are the outputs' too.
    self.assertEqual(mem["alias_bytes"],
                     state_bytes + n_scalars * _TILE_BYTES)
    self.assertTrue(mem["fits"])
    # FSDP over 4 chips gathers the weights: all-gathers are present.
    self.assertIn("all-gather", rep["collectives"])
    # The LM pipeline's packed batch (positions + segment ids) is attended
    # by the splash kernel with segment ids, no dense mask: forward and
    # backward kernels in the step.
    self.assertIn("splash_mha_fwd", " ".join(rep["kernels"]))
    self.assertIn("splash_mha_dq", " ".join(rep["kernels"]))
    self.assertGreater(rep["flops_per_chip"], 0)
    self.assertEqual(
        rep["flops_per_chip"] * 4,
        ts.spec.flops_per_token(128) * 8 * 128)
    self.assertGreater(rep["roofline"]["step_lower_bound_s"], 0)

  def test_out_of_memory_is_one_message(self):
    config = _config(batch_size=256, seq_len=4096)
    config.model.update(vocab_size=32768, num_layers=1)
    with self.assertRaises(aot.HbmOomError) as cm:
      aot.compile_train_step(config, self.devices)
    msg = str(cm.exception)
    self.assertIn("the train step needs", msg)
    self.assertIn("GiB of HBM per chip", msg)
    for knob in ("mesh.fsdp", "remat", "train.batch_size",
                 "loss.chunk_size"):
      self.assertIn(knob, msg)
    self.assertNotIn("Traceback", msg)
    self.assertLess(len(msg.splitlines()), 3)

  def test_cli_run_writes_json_with_the_sampler(self):
    # A sampling experiment (generate): train step, prefill and decode.
    from jaxlab.configs import generate  # pylint: disable=g-import-not-at-top
    from jaxlab.experiments import compile as compile_cli  # pylint: disable=g-import-not-at-top
    config = generate.get_config("tiny")
    config.mesh.update(data=1, fsdp=-1)
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, "aot.json")
      compile_cli.run(config, "v5e:2x2", out=out)
      with open(out) as f:
        report = json.load(f)
    self.assertEqual(report["chips"], 4)
    self.assertTrue(report["train_step"]["memory"]["fits"])
    self.assertEqual(set(report["sampler"]), {"prefill", "decode"})
    for rep in report["sampler"].values():
      self.assertTrue(rep["memory"]["fits"])
      self.assertGreater(rep["memory"]["argument_bytes"], 0)
      self.assertGreater(rep["flops_per_chip"], 0)

  def test_paper_preset_eval_step_takes_the_params_only(self):
    # A zero-shot paper's preset compiles the forward pass on its own
    # topology (config.scale), here rope_extension:paper cut to 2 layers
    # and 8k tokens; its arguments are the parameters and the batch, no
    # optimizer state.
    from jaxlab.configs import rope_extension  # pylint: disable=g-import-not-at-top
    from jaxlab.experiments import compile as compile_cli  # pylint: disable=g-import-not-at-top
    config = rope_extension.get_config("paper")
    self.assertEqual(config.scale.topology, "v5p:2x2x4")
    config.model.update(num_layers=2, vocab_size=8192, dim=1024,
                        mlp_dim=2048, num_heads=8, num_kv_heads=8)
    config.train.seq_len = 2048
    report = compile_cli.run(config, None, sampler=False)
    ev = report["eval_step"]
    self.assertEqual(report["chips"], 16)
    self.assertTrue(ev["memory"]["fits"])
    # fp32 params sharded 16 ways (+ padding of small dims) + the batch.
    params = (8192 * 1024 + 2 * (4 * 1024 * 1024 + 3 * 1024 * 2048 + 2 * 1024)
              + 1024 + 8192 * 1024) * 4
    args = ev["memory"]["argument_bytes"]
    self.assertGreaterEqual(args, params // 16)
    self.assertLess(args, params // 16 + ev["batch_bytes_per_chip"]
                    + (1 << 20))
    self.assertIn("splash_mha_fwd", " ".join(ev["kernels"]))
    # Forward FLOPs: a third of the training count (2N of 6N, attention
    # likewise).
    from jaxlab.models import registry  # pylint: disable=g-import-not-at-top
    dcfg = registry.decoder_config(config.model)
    self.assertAlmostEqual(
        ev["flops_per_token"],
        registry.decoder_train_flops_per_token(dcfg, 2048) / 3, delta=1.0)

  def test_vision_preset_compiles_the_tower_sharded(self):
    # chart_to_code:paper (the whole Qwen2.5-VL prefix LM) cut to a
    # 2-layer LM and a 2-block tower, on 4 chips: the step reads images +
    # ids + mask, and every weight with an "embed" axis (the tower's too)
    # is sharded 4 ways, the rest (biases / norms on heads, mlp or norm
    # axes) replicated. Param, Adam mu and nu: 3 fp32 copies.
    from jaxlab.configs import chart_to_code  # pylint: disable=g-import-not-at-top
    from jaxlab.experiments import import_loss_modules  # pylint: disable=g-import-not-at-top
    import_loss_modules()
    config = chart_to_code.get_config("paper")
    v, d, h, k, hd, f, layers = 512, 512, 4, 2, 128, 512, 2
    config.model.update(vocab_size=v, dim=d, num_layers=layers, num_heads=h,
                        num_kv_heads=k, head_dim=hd, mlp_dim=f)
    dv, fv, pd = 256, 512, 3 * 2 * 14 * 14   # tower width, MLP, patch dim
    config.model.vision.update(depth=2, hidden_size=dv, intermediate_size=fv,
                               num_heads=2, fullatt_block_indexes=(1,),
                               out_hidden_size=d)
    config.model.prefix.image_size = (224, 224)  # 16 x 16 patches
    config.train.update(batch_size=8, seq_len=128)
    config.optim.grad_accum = 1
    rep = aot.compile_train_step(config, self.devices)
    m = 4 * dv                                 # merged unit width
    lm_sharded = 2 * v * d + layers * (2 * d * h * hd + 2 * d * k * hd
                                       + 3 * d * f)
    lm_repl = layers * (h * hd + 2 * k * hd + 2 * d) + d
    tower_sharded = (pd * dv + 2 * (dv * 3 * dv + dv * dv + dv
                                    + 3 * dv * fv + dv)
                     + m * m + m * d + d)
    tower_repl = 2 * (2 * dv + 3 * dv + 2 * fv) + dv + m
    params = lm_sharded + lm_repl + tower_sharded + tower_repl
    self.assertEqual(rep["params"], params)
    ts = rep["_train_state"]
    scalars = sum(np.dtype(x.dtype).itemsize for x in jax.tree.leaves(
        ts.state) if not x.shape)
    per_chip = 3 * 4 * ((lm_sharded + tower_sharded) // 4 + lm_repl
                        + tower_repl) + scalars
    self.assertEqual(rep["state_bytes_per_chip"], per_chip)
    # The tower is scanned like the decoder (the preset's scan_layers): its
    # blocks' weights stacked [depth, ...], the embed axis sharded.
    self.assertTrue(config.model.get("scan_layers", True))
    qkv, = [x for path, x in jax.tree_util.tree_flatten_with_path(
        ts.state)[0] if jax.tree_util.keystr(path).startswith(
            "[0]['vl']['visual']['scan_blocks'][0]['qkv']['kernel']")]
    self.assertEqual(qkv.shape, (2, dv, 3 * dv))
    self.assertEqual(qkv.sharding.shard_shape(qkv.shape),
                     (2, dv // 4, 3 * dv))
    # The batch: 2 rows per chip of a 224 x 224 x 3 float32 image, int32
    # ids and float32 mask of 128.
    self.assertEqual(rep["batch_bytes_per_chip"],
                     2 * (224 * 224 * 3 * 4 + 128 * 4 + 128 * 4))
    self.assertGreaterEqual(rep["memory"]["argument_bytes"],
                            per_chip + rep["batch_bytes_per_chip"])
    # The tower runs batch-sharded (2 images per chip, the weights
    # all-gathered): no all-reduce carries tower activations of the whole
    # batch ([8, 256, ...]: what GSPMD does when it splits the tower's
    # matmuls over their FSDP-sharded contracting dim instead).
    shapes = [m.group(1) for m in re.finditer(
        r"= (.*?) all-reduce(?:-start)?\(", rep["_hlo"])]
    self.assertNotEmpty(shapes)
    self.assertEmpty([x for x in shapes if "[8,256" in x])
    # The tower's 256 patches per image and the 66 + 128 positions of the
    # LM are splash attention (segment ids / causal): forward kernels of
    # the 2 tower blocks and of the (remat'd) scanned LM layer.
    self.assertGreaterEqual(
        sum(n for name, n in rep["kernels"].items() if "fwd" in name), 4)
    # FLOPs per text token, by hand: the LM's 6 N (every weight but the
    # input embedding) + attention over the 66 prefix + 128 text
    # positions, and 3 x the tower's forward on one image (2 per weight
    # per row; 4 * 256 per attended pair: one full block over 256
    # patches, one window block over 4 windows of 64).
    lm = (6 * (lm_sharded + lm_repl - v * d)
          + 12 * layers * 194 * h * hd) * 194
    tower = 2 * (256 * (pd * dv + 2 * (4 * dv * dv + 3 * dv * fv))
                 + 64 * (m * m + m * d)) + 4 * dv * (256 ** 2 + 4 * 64 ** 2)
    self.assertAlmostEqual(rep["flops_per_token"],
                           (lm + 3 * tower) / 128, delta=1.0)

  def test_multislice_mesh_puts_data_across_slices(self):
    devices = aot.topology_devices("v5e:2x2", num_slices=2)
    self.assertLen(devices, 8)
    mesh = aot.make_mesh({"data": 2, "fsdp": 4, "tensor": 1}, devices)
    slices = np.vectorize(lambda d: d.slice_index)(mesh.devices)
    # Each data row is one slice; fsdp stays within it.
    self.assertEqual(slices[:, :, 0].tolist(), [[0] * 4, [1] * 4])
    with self.assertRaisesRegex(ValueError, "multiple of the slice count"):
      aot.make_mesh({"data": 1, "fsdp": 8, "tensor": 1}, devices)


if __name__ == "__main__":
  absltest.main()
