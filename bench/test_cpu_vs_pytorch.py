#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""cpu_vs_pytorch.py's reading of oneDNN's verbose lines (onednn_steps): steps found
at the first forward convolution, the evaluation's batch left out, activation
reorders told from filter reorders (also where a filter's first dimension equals the
batch), warm-up steps dropped. The lines are oneDNN 2.6's format as the engine
printed them (fmnist-cnn, batch 64)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_vs_pytorch as cvp  # noqa: E402

P = "onednn_verbose,exec,cpu,"
ATTR = "attr-scratchpad:user "


def reorder(src, dst, dims, ms):
    return f"{P}reorder,jit:blk,undef,src_f32::blocked:{src}:f0 dst_f32::blocked:{dst}:f0,{ATTR},,{dims},{ms}"


def conv(prop, mb, ic, oc, hw, ms):
    return (f"{P}convolution,jit:avx512_core,{prop},src_f32::blocked:aBcd16b:f0 "
            f"wei_f32::blocked:ABcd16b16a:f0,{ATTR},alg:convolution_direct,"
            f"mb{mb}_ic{ic}oc{oc}_ih{hw}oh{hw}kh3sh1dh0ph1_iw{hw}ow{hw}kw3sw1dw0pw1,{ms}")


def step(scale=1.0):
    """One training step at batch 64: (lines, what it adds up to)."""
    lines = [
        reorder("abcd", "Acdb16a", "32x1x3x3", 0.1 * scale),          # filter
        conv("forward_training", 64, 1, 32, 28, 0.2 * scale),
        reorder("aBcd16b", "abcd", "64x32x28x28", 0.3 * scale),       # activation out
        reorder("abcd", "aBcd16b", "64x32x14x14", 0.1 * scale),       # activation in
        reorder("abcd", "ABcd16b16a", "64x32x3x3", 0.05 * scale),     # filter, 64 = batch
        conv("forward_training", 64, 32, 64, 14, 2.0 * scale),
        reorder("aBcd16b", "abcd", "64x64x14x14", 0.2 * scale),
        "onednn_verbose,info,a line that is no execution",
        conv("backward_data", 64, 32, 64, 14, 1.5 * scale),
        conv("backward_weights", 64, 32, 64, 14, 2.5 * scale),
    ]
    totals = {"convolution forward_training": 2.2 * scale, "convolution backward_data": 1.5 * scale,
              "convolution backward_weights": 2.5 * scale, "reorder activations": 0.6 * scale,
              "reorder filters": 0.15 * scale}
    return lines, totals


def evaluation():
    return [reorder("abcd", "Acdb16a", "32x1x3x3", 9.0), conv("forward_training", 40, 1, 32, 28, 9.0),
            reorder("aBcd16b", "abcd", "40x32x28x28", 9.0)]


class OnednnSteps(unittest.TestCase):
    def test_sums_a_step_by_kind(self):
        lines = []
        for s in (50.0, 1.0, 1.0, 1.0, 1.0):  # a slow first step, then the steady ones
            lines += step(s)[0]
        lines += evaluation()
        r = cvp.onednn_steps(lines, batch=64, warmup=1, steps=3)
        self.assertEqual(r["steps"], 3)
        for key, ms in step()[1].items():
            self.assertAlmostEqual(r["ms_per_step"][key], ms, places=3, msg=key)
        self.assertEqual(r["calls_per_step"]["reorder activations"], 3)
        self.assertEqual(r["calls_per_step"]["reorder filters"], 2)
        self.assertEqual(r["calls_per_step"]["convolution forward_training"], 2)
        mb = 4 * 64 * (32 * 28 * 28 + 32 * 14 * 14 + 64 * 14 * 14) / 1e6
        self.assertAlmostEqual(r["activation_reorder_mb_read_per_step"], round(mb, 2))

    def test_the_evaluation_after_the_last_step_is_left_out(self):
        lines = []
        for _ in range(3):
            lines += step()[0]
        lines += evaluation()
        # Two steps kept after one of warm-up: the third, with the evaluation's
        # filter reorder behind it, is the step run to be left out.
        r = cvp.onednn_steps(lines, batch=64, warmup=1, steps=1)
        self.assertAlmostEqual(r["ms_per_step"]["reorder filters"], 0.15, places=3)
        self.assertNotIn("error", r)

    def test_another_batch_size_is_not_the_step(self):
        lines = step()[0] + step()[0] + evaluation()[1:] + step()[0] + step()[0]
        r = cvp.onednn_steps(lines, batch=64, warmup=1, steps=2)
        self.assertAlmostEqual(r["ms_per_step"]["convolution forward_training"], 2.2, places=3)
        self.assertAlmostEqual(r["ms_per_step"]["reorder activations"], 0.6, places=3)

    def test_too_few_steps_is_an_error_not_a_figure(self):
        lines = step()[0] + step()[0]
        r = cvp.onednn_steps(lines, batch=64, warmup=1, steps=1)
        self.assertIn("error", r)
        self.assertIn("2 steps seen", r["error"])

    def test_onednn_3_lines(self):
        """oneDNN 3.x (PyTorch 2.x's) puts "v1,primitive," before "exec" and a colon
        after each memory descriptor's name (a line as PyTorch 2.15 printed it)."""
        def v3(line):
            return (line.replace("onednn_verbose,exec,", "onednn_verbose,v1,primitive,exec,")
                    .replace("_f32::blocked:", ":f32::blocked:").replace(":f0", "::f0"))
        lines = [v3(l) for _ in range(3) for l in step()[0]]
        lines.insert(0, "onednn_verbose,v1,primitive,info,template:operation,engine,primitive,"
                        "implementation,prop_kind,memory_descriptors,attributes,auxiliary,"
                        "problem_desc,exec_time")
        self.assertIn("exec,cpu,reorder,jit:blk,undef,src:f32::blocked:abcd::f0 dst:", lines[1])
        r = cvp.onednn_steps(lines, batch=64, warmup=1, steps=1)
        for key, ms in step()[1].items():
            self.assertAlmostEqual(r["ms_per_step"][key], ms, places=3, msg=key)
        self.assertEqual(r["implementations"]["convolution backward_data"], ["jit:avx512_core"])

    def test_activation_and_filter_reorders(self):
        self.assertTrue(cvp.onednn_activation_reorder(
            "src_f32::blocked:abcd:f0 dst_f32::blocked:aBcd16b:f0", "64x32x14x14", 64))
        self.assertFalse(cvp.onednn_activation_reorder(
            "src_f32::blocked:abcd:f0 dst_f32::blocked:ABcd16b16a:f0", "64x32x3x3", 64))
        self.assertFalse(cvp.onednn_activation_reorder(  # the evaluation's batch
            "src_f32::blocked:aBcd16b:f0 dst_f32::blocked:abcd:f0", "40x32x28x28", 64))


if __name__ == "__main__":
    unittest.main()
